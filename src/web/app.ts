import {
  type Conversation,
  deleteConversation,
  listConversations,
  listMessages,
  listModels,
  type Message,
  type OpenAiModel,
  readUsage,
  streamChat,
} from "./api";
import { byId, describeError, MessageView } from "./view";

const PAGE_ROWS = 20;
/** The sidebar shows this many most recent conversations. */
const CONVERSATION_ROWS = 100;
// sessionStorage, not localStorage: the key is gone when the tab closes, and never in the URL.
const KEY_ITEM = "parley.key";
const CONVERSATION_ITEM = "parley.conversation";

const settings = byId<HTMLFormElement>("settings");
const keyInput = byId<HTMLInputElement>("key");
const conversationInput = byId<HTMLInputElement>("conversation");
const conversationList = byId<HTMLDataListElement>("conversations");
const sidebarList = byId<HTMLUListElement>("conversation-list");
const noConversations = byId<HTMLParagraphElement>("no-conversations");
const temperature = byId<HTMLInputElement>("temperature");
const temperatureValue = byId<HTMLOutputElement>("temperature-value");
const maxTokens = byId<HTMLInputElement>("max-tokens");
const toolsInput = byId<HTMLInputElement>("tools");
const scroller = document.querySelector("main")!;
const log = byId<HTMLOListElement>("log");
const loadOlderButton = byId<HTMLButtonElement>("load-older");
const errorLine = byId<HTMLParagraphElement>("error");
const composer = byId<HTMLFormElement>("composer");
const messageInput = byId<HTMLTextAreaElement>("message");
const sendButton = byId<HTMLButtonElement>("send");
const stopButton = byId<HTMLButtonElement>("stop");
const quotaLine = byId<HTMLParagraphElement>("quota");
const modelField = byId<HTMLLabelElement>("model-field");
const modelSelect = byId<HTMLSelectElement>("model");
const attachField = byId<HTMLDivElement>("attach-field");
const pictureInput = byId<HTMLInputElement>("picture");
const attachButton = byId<HTMLButtonElement>("attach");
const attachedImage = byId<HTMLImageElement>("attached");
const detachButton = byId<HTMLButtonElement>("detach");

/** The MCP servers the settings name (labels, comma-separated), as a request's `tools`. */
function toolsOf(value: string): { tools?: string[] } {
  const labels = value
    .split(",")
    .map((label) => label.trim())
    .filter((label) => label !== "");
  return labels.length > 0 ? { tools: labels } : {};
}

/** A picture's file, at most (the server's limit). */
const MAX_PICTURE_BYTES = 20 * 2 ** 20;

/** The service's chat models, the default first. */
let models: OpenAiModel[] = [];
/** The model the open conversation's newest reply came from, once its history is read. */
let conversationModel: string | undefined;
/** The picture to send with the next message, as a data URL. */
let attached: string | undefined;

/** Ids already in the log: a page fetched after new turns were added overlaps the one before it. */
let shown = new Set<number>();
let nextPage: number | undefined;
let inFlight: AbortController | undefined;
/** Bumped when the key or conversation changes, so a slow answer for the old one is dropped. */
let epoch = 0;

const newConversationId = () => `chat-${crypto.getRandomValues(new Uint32Array(1))[0]!.toString(36)}`;

function showError(error: unknown): void {
  // Shown before it is filled: an alert is announced when its text changes, not when it appears.
  errorLine.hidden = false;
  errorLine.textContent = describeError(error);
}

function clearError(): void {
  errorLine.hidden = true;
  errorLine.textContent = "";
}

/** Keeps the newest text in view unless the reader has scrolled up to read older messages. */
function follow(action: () => void): void {
  const atBottom = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 48;
  action();
  if (atBottom) scroller.scrollTop = scroller.scrollHeight;
}

/** Adds one page of history (newest first, as the API sorts it) above what is shown. */
function prepend(messages: readonly Message[]): void {
  const before = scroller.scrollHeight;
  for (const message of messages) {
    if (shown.has(message.id)) continue;
    shown.add(message.id);
    log.prepend(MessageView.of(message).element);
  }
  scroller.scrollTop += scroller.scrollHeight - before;
}

async function loadPage(page: number): Promise<void> {
  const key = keyInput.value.trim();
  if (!key || !conversationInput.checkValidity()) return;
  const asked = epoch;
  const result = await listMessages(key, conversationInput.value, page, PAGE_ROWS);
  if (asked !== epoch) return;
  if (page === 1) {
    conversationModel = result.data.find((message) => message.model !== undefined)?.model;
    followConversation();
  }
  prepend(result.data);
  nextPage = page < result.pagination.total_pages ? page + 1 : undefined;
  loadOlderButton.hidden = nextPage === undefined;
}

async function reloadHistory(): Promise<void> {
  clearError();
  epoch++;
  log.replaceChildren();
  shown = new Set();
  nextPage = undefined;
  conversationModel = undefined;
  loadOlderButton.hidden = true;
  try {
    await loadPage(1);
    scroller.scrollTop = scroller.scrollHeight;
  } catch (error) {
    showError(error);
  }
}

/**
 * The picker, when the service has several chat models (embedding and ranking models cannot
 * answer): the default first and chosen unless another was, or the open conversation's.
 */
async function refreshModels(): Promise<void> {
  const key = keyInput.value.trim();
  try {
    const listed = key ? await listModels(key) : [];
    if (key !== keyInput.value.trim()) return;
    models = listed.filter((model) => model.purpose === "chat");
    const chosen = modelSelect.value;
    modelSelect.replaceChildren(...models.map((model, i) => new Option(i === 0 ? `${model.id} (default)` : model.id, model.id)));
    if (models.some((model) => model.id === chosen)) modelSelect.value = chosen;
    modelField.hidden = models.length < 2;
  } catch {
    modelField.hidden = true;
  }
  followConversation();
}

/**
 * A reopened conversation continues with the model its newest reply came from, while it is
 * served: a question about a picture goes on to the model that saw it.
 */
function followConversation(): void {
  const model = models.find((listed) => listed.id === conversationModel);
  if (model) modelSelect.value = model.id;
  showAttach();
}

/** Pictures can be attached while the model that will answer sees them. */
function showAttach(): void {
  const answering = models.find((model) => model.id === modelSelect.value) ?? models[0];
  attachField.hidden = answering?.vision !== true;
  if (attachField.hidden) attach(undefined);
}

/** The picture to send with the next message, shown beside the composer; undefined removes it. */
function attach(url: string | undefined): void {
  attached = url;
  attachedImage.hidden = detachButton.hidden = url === undefined;
  if (url) attachedImage.src = url;
  else attachedImage.removeAttribute("src");
  pictureInput.value = "";
}

async function pickPicture(): Promise<void> {
  const file = pictureInput.files?.[0];
  if (!file) return;
  if (file.size > MAX_PICTURE_BYTES) {
    showError(`The picture is ${file.size.toLocaleString("en-US")} bytes; at most ${MAX_PICTURE_BYTES.toLocaleString("en-US")} can be sent.`);
    attach(undefined);
    return;
  }
  clearError();
  const url = await new Promise<string>((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result as string);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
  attach(url);
}

/** "N tokens left today" when a token quota applies to the key's user; nothing otherwise. */
async function refreshQuota(): Promise<void> {
  const key = keyInput.value.trim();
  try {
    const quota = key ? (await readUsage(key)).quota : null;
    if (key !== keyInput.value.trim()) return;
    quotaLine.hidden = quota === null;
    if (quota) quotaLine.textContent = `${quota.remaining.toLocaleString("en-US")} tokens left ${quota.period === "day" ? "today" : "this month"}`;
  } catch {
    quotaLine.hidden = true;
  }
}

/** The user's conversations, in the sidebar and as suggestions; a failure here is reported by the history load. */
async function refreshConversations(): Promise<void> {
  const key = keyInput.value.trim();
  if (!key) return;
  try {
    const { data } = await listConversations(key, 1, CONVERSATION_ROWS);
    if (key !== keyInput.value.trim()) return;
    conversationList.replaceChildren(...data.map((conversation) => new Option(conversation.conversation_id)));
    sidebarList.replaceChildren(...data.map(conversationItem));
    noConversations.hidden = data.length > 0;
    markCurrent();
  } catch {}
}

function conversationItem(conversation: Conversation): HTMLLIElement {
  const title = conversation.title.trim() || conversation.conversation_id;
  const item = document.createElement("li");
  item.dataset.id = conversation.conversation_id;
  const open = document.createElement("button");
  open.type = "button";
  open.className = "open";
  const name = document.createElement("span");
  name.className = "title";
  name.textContent = title;
  const about = document.createElement("small");
  const count = conversation.message_count;
  about.textContent = `${new Date(conversation.updated_at).toLocaleString()} · ${count} message${count === 1 ? "" : "s"}`;
  open.append(name, about);
  open.addEventListener("click", () => switchTo(conversation.conversation_id));
  const remove = document.createElement("button");
  remove.type = "button";
  remove.className = "delete";
  remove.textContent = "Delete";
  remove.setAttribute("aria-label", `Delete “${title}”`);
  remove.addEventListener("click", () => void removeConversation(conversation.conversation_id, title));
  item.append(open, remove);
  return item;
}

/** Highlights the open conversation in the sidebar. */
function markCurrent(): void {
  for (const item of sidebarList.children) {
    const open = item.querySelector(".open")!;
    if ((item as HTMLElement).dataset.id === conversationInput.value) open.setAttribute("aria-current", "true");
    else open.removeAttribute("aria-current");
  }
}

function switchTo(conversationId: string): void {
  conversationInput.value = conversationId;
  sessionStorage.setItem(CONVERSATION_ITEM, conversationId);
  markCurrent();
  void reloadHistory();
}

async function removeConversation(conversationId: string, title: string): Promise<void> {
  const key = keyInput.value.trim();
  if (!confirm(`Delete the conversation “${title}”? Its messages cannot be restored.`)) return;
  clearError();
  try {
    await deleteConversation(key, conversationId);
  } catch (error) {
    showError(error);
    return;
  }
  if (conversationId === conversationInput.value) switchTo(newConversationId());
  await refreshConversations();
}

async function loadOlder(): Promise<void> {
  // aria-disabled, not disabled: a focused button that gets disabled drops keyboard focus to <body>.
  if (nextPage === undefined || loadOlderButton.getAttribute("aria-disabled") === "true") return;
  loadOlderButton.setAttribute("aria-disabled", "true");
  try {
    await loadPage(nextPage);
  } catch (error) {
    showError(error);
  } finally {
    loadOlderButton.removeAttribute("aria-disabled");
  }
  // The button disappears once the first message is reached; keep keyboard focus in the page.
  if (loadOlderButton.hidden) log.focus();
}

async function send(): Promise<void> {
  const key = keyInput.value.trim();
  const text = messageInput.value;
  if (!key) {
    showError("Paste an API key first.");
    keyInput.focus();
    return;
  }
  // The inputs' own constraints (range, min/max, pattern) are the validation: nothing invalid is sent.
  if (!settings.reportValidity() || text.trim() === "") return;
  clearError();
  const controller = new AbortController();
  inFlight = controller;
  sendButton.setAttribute("aria-disabled", "true");
  stopButton.disabled = false;
  messageInput.value = "";

  const picture = attached;
  const question = new MessageView("user", text);
  if (picture) question.pictures([picture]);
  attach(undefined);
  const reply = new MessageView("assistant", "", follow);
  reply.element.setAttribute("aria-busy", "true");
  follow(() => log.append(question.element, reply.element));
  let replyId: number | undefined;
  let finish: string | undefined;
  try {
    const request = {
      message: text,
      conversation_id: conversationInput.value,
      temperature: temperature.valueAsNumber,
      max_tokens: maxTokens.valueAsNumber,
      ...(modelField.hidden || modelSelect.value === "" ? {} : { model: modelSelect.value }),
      ...(picture ? { images: [picture.slice(picture.indexOf(",") + 1)] } : {}),
      ...toolsOf(toolsInput.value),
    };
    for await (const item of streamChat(key, request, controller.signal)) {
      if (item.event === "start") {
        question.settle(item.data.user_message.id);
        shown.add(item.data.user_message.id);
      } else if (item.event === "reasoning") follow(() => reply.think(item.data.content));
      else if (item.event === "delta") follow(() => reply.append(item.data.content));
      else if (item.event === "tool_call") follow(() => reply.toolCall(item.data));
      else if (item.event === "tool_result") follow(() => reply.toolCall(item.data));
      else if (item.event === "done") {
        for (const call of item.data.tool_calls ?? []) reply.toolCall(call);
        replyId = item.data.message.id;
        finish = item.data.message.finish_reason;
        shown.add(replyId);
      }
    }
    if (replyId === undefined) throw new Error("The connection closed before the reply was complete.");
  } catch (error) {
    if (controller.signal.aborted) finish = "cancelled";
    else if (question.element.dataset.id === undefined) {
      // Refused before the message was stored: give the text back to edit and resend.
      showError(error);
      question.element.remove();
      reply.element.remove();
      messageInput.value = text;
      if (picture) attach(picture);
    } else follow(() => reply.fail(describeError(error)));
  } finally {
    reply.settle(replyId, finish);
    inFlight = undefined;
    sendButton.removeAttribute("aria-disabled");
    // Disabling the focused Stop button would drop keyboard focus to <body>.
    if (document.activeElement === stopButton) messageInput.focus();
    stopButton.disabled = true;
  }
  void refreshConversations();
  void refreshQuota();
}

function start(): void {
  keyInput.value = sessionStorage.getItem(KEY_ITEM) ?? "";
  conversationInput.value = sessionStorage.getItem(CONVERSATION_ITEM) ?? newConversationId();
  sessionStorage.setItem(CONVERSATION_ITEM, conversationInput.value);
  temperatureValue.value = temperature.value;

  keyInput.addEventListener("change", () => {
    sessionStorage.setItem(KEY_ITEM, keyInput.value.trim());
    loadForKey();
  });
  conversationInput.addEventListener("change", () => {
    if (!conversationInput.reportValidity()) return;
    switchTo(conversationInput.value);
  });
  byId("new-conversation").addEventListener("click", () => {
    switchTo(newConversationId());
    messageInput.focus();
  });
  temperature.addEventListener("input", () => (temperatureValue.value = temperature.value));
  settings.addEventListener("submit", (event) => event.preventDefault());
  loadOlderButton.addEventListener("click", () => void loadOlder());
  composer.addEventListener("submit", (event) => {
    event.preventDefault();
    if (!inFlight) void send();
  });
  messageInput.addEventListener("keydown", (event) => {
    // Enter sends; Shift+Enter is a new line; Enter that confirms an IME composition is neither.
    if (event.key !== "Enter" || event.shiftKey || event.isComposing) return;
    event.preventDefault();
    composer.requestSubmit();
  });
  stopButton.addEventListener("click", () => inFlight?.abort());
  modelSelect.addEventListener("change", showAttach);
  attachButton.addEventListener("click", () => pictureInput.click());
  pictureInput.addEventListener("change", () => void pickPicture().catch(showError));
  detachButton.addEventListener("click", () => {
    attach(undefined);
    attachButton.focus();
  });

  if (keyInput.value) loadForKey();
  else keyInput.focus();
}

/** Everything the page shows depends on the key: another key sees other conversations, quota and models. */
function loadForKey(): void {
  void reloadHistory();
  void refreshConversations();
  void refreshQuota();
  void refreshModels();
}

start();
