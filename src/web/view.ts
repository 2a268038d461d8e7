import { ApiError, type ChatToolCall, type ChatToolCallStart, type Message } from "./api";
import { renderMarkdown } from "./markdown";

/** `document.getElementById` for elements the page cannot work without. */
export function byId<T extends HTMLElement>(id: string): T {
  const element = document.getElementById(id);
  if (!element) throw new Error(`#${id} is missing from the page`);
  return element as T;
}

const FINISH_NOTES: Record<string, string> = { cancelled: "stopped", length: "cut off at the token limit" };

/** While a reply streams, its Markdown is rendered again at most this often. */
const RENDER_INTERVAL_MS = 80;

/**
 * One message in the log. The user's words are shown as typed (`textContent`); a reply is
 * Markdown, rendered and sanitized (markdown.ts). `.body`'s `data-source` keeps the reply's text
 * as received, which rendering does not preserve (marks, spacing).
 */
export class MessageView {
  readonly element = document.createElement("li");
  private readonly body = document.createElement("div");
  /** A reasoning model's thought, once one arrives. */
  private thought: HTMLElement | undefined;
  /** The calls of servers' tools the reply made, by id. */
  private readonly calls = new Map<string, HTMLDetailsElement>();
  private source = "";
  private renderTimer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    private readonly role: Message["role"],
    content = "",
    /** Runs each redraw, e.g. to keep the log scrolled to the newest text. */
    private readonly redraw: (draw: () => void) => void = (draw) => draw(),
  ) {
    this.element.className = `message ${role}`;
    const who = document.createElement("span");
    who.className = "who";
    who.textContent = role === "user" ? "You" : "Parley";
    this.body.className = role === "assistant" ? "body markdown" : "body";
    this.element.append(who, this.body);
    this.append(content);
    this.render();
  }

  static of(message: Message): MessageView {
    const view = new MessageView(message.role, message.content);
    if (message.images) view.pictures(message.images);
    if (message.reasoning !== undefined) view.think(message.reasoning);
    view.settle(message.id, message.finish_reason);
    return view;
  }

  append(text: string): void {
    this.source += text;
    if (this.role === "user") {
      this.body.append(text);
      return;
    }
    this.body.dataset.source = this.source;
    // Rendering the whole text per token would be quadratic in the reply's length.
    this.renderTimer ??= setTimeout(() => this.render(), RENDER_INTERVAL_MS);
  }

  /** Shows the message's pictures (data URLs) below its text. */
  pictures(urls: readonly string[]): void {
    const row = document.createElement("div");
    row.className = "pictures";
    for (const [i, url] of urls.entries()) {
      const image = document.createElement("img");
      image.src = url;
      image.alt = `Attachment ${i + 1} of this message`;
      row.append(image);
    }
    this.body.after(row);
  }

  /**
   * Adds to the reply's thought, shown folded (a <details>) above the answer: plain text, as the
   * model thought it, never rendered as Markdown.
   */
  think(text: string): void {
    if (!this.thought) {
      const details = document.createElement("details");
      details.className = "reasoning";
      const summary = document.createElement("summary");
      summary.textContent = "Reasoning";
      this.thought = document.createElement("div");
      this.thought.className = "thought";
      details.append(summary, this.thought);
      this.body.before(details);
    }
    this.thought.append(text);
  }

  /**
   * Shows a call of a server's tool folded (a <details>) above the answer: its name and, once
   * made, its arguments and its result, as plain text (a result is data, never rendered).
   */
  toolCall(call: ChatToolCallStart | ChatToolCall): void {
    let details = this.calls.get(call.id);
    if (!details) {
      details = document.createElement("details");
      details.className = "tool-call";
      const summary = document.createElement("summary");
      summary.textContent = `${call.server}: ${call.name}`;
      details.append(summary);
      this.calls.set(call.id, details);
      this.body.before(details);
    }
    const part = (name: string, text: string) => {
      let block = details.querySelector<HTMLElement>(`.${name}`);
      if (!block) {
        block = document.createElement("pre");
        block.className = name;
        details.append(block);
      }
      block.textContent = text;
    };
    part("arguments", call.arguments);
    if (!("output" in call)) return;
    details.dataset.outcome = call.error ? "error" : "done";
    part("result", call.error ? `${call.error.type} error: ${call.error.message}` : (call.output ?? ""));
  }

  /** Says, where the reply stands, why it failed: a reply is never left an empty bubble. */
  fail(reason: string): void {
    this.element.classList.add("failed");
    const failure = document.createElement("p");
    failure.className = "failure";
    failure.textContent = reason;
    this.element.append(failure);
  }

  /** Marks the message as stored (`id`) and says why a reply ended, unless it ended by itself. */
  settle(id: number | undefined, finish?: string): void {
    this.render();
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

  private render(): void {
    clearTimeout(this.renderTimer);
    this.renderTimer = undefined;
    if (this.role === "assistant") this.redraw(() => this.body.replaceChildren(renderMarkdown(this.source)));
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
