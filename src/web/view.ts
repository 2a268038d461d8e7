import { ApiError, type Message } from "./api";

/** `document.getElementById` for elements the page cannot work without. */
export function byId<T extends HTMLElement>(id: string): T {
  const element = document.getElementById(id);
  if (!element) throw new Error(`#${id} is missing from the page`);
  return element as T;
}

const FINISH_NOTES: Record<string, string> = { cancelled: "stopped", length: "cut off at the token limit" };

/** One message in the log; text only (`textContent`), so a reply can never inject markup. */
export class MessageView {
  readonly element = document.createElement("li");
  private readonly body = document.createElement("p");

  constructor(role: Message["role"], content = "") {
    this.element.className = `message ${role}`;
    const who = document.createElement("span");
    who.className = "who";
    who.textContent = role === "user" ? "You" : "Parley";
    this.body.className = "body";
    this.body.textContent = content;
    this.element.append(who, this.body);
  }

  static of(message: Message): MessageView {
    const view = new MessageView(message.role, message.content);
    view.settle(message.id, message.finish_reason);
    return view;
  }

  get text(): string {
    return this.body.textContent ?? "";
  }

  append(text: string): void {
    this.body.append(text);
  }

  /** Marks the message as stored (`id`) and says why a reply ended, unless it ended by itself. */
  settle(id: number | undefined, finish?: string): void {
    if (id !== undefined) this.element.dataset.id = String(id);
    if (finish) this.element.dataset.finish = finish;
    this.element.removeAttribute("aria-busy");
    const note = finish ? FINISH_NOTES[finish] : undefined;
    if (note) {
      const small = document.createElement("small");
      small.className = "note";
      small.textContent = `(${note})`;
      this.element.append(small);
    }
  }
}

/** The inline error line: the API's own message, its status and code, and when to retry. */
export function describeError(error: unknown): string {
  if (error instanceof ApiError) {
    const retry = error.retryAfterS === undefined ? "" : ` Try again in ${error.retryAfterS} s.`;
    const id = error.requestId ? ` Request id: ${error.requestId}.` : "";
    const status = error.status === undefined ? error.code : `${error.status} ${error.code}`;
    return `${error.message} (${status}).${retry}${id}`;
  }
  if (error instanceof TypeError) return "Cannot reach the server; check the connection and try again.";
  return String(error instanceof Error ? error.message : error);
}
