/**
 * Renders a conversation with the model's chat template and trims it to fit the context.
 *
 * Trimming happens here rather than in a context shift because the engine must know the exact
 * prompt (for token counts and the `prompt` it reports) before generation starts, and because
 * LlamaChat's default shift dropped the new message itself: with a 256-token context, both a
 * 16,000-character message and a 40-turn history left it answering a conversation with no user
 * turn at all. The policy here: drop the oldest turns first, keeping leading system
 * turns; if the new message alone is still too long, keep its end (the newest text).
 *
 * The work is bounded by the context, not by the history: turns older than what could possibly fit
 * are dropped by their length before anything is rendered, tokenized runs are remembered across
 * renders and turns (token-cache.ts), and the event loop gets a turn between two tokenizations, so
 * one long conversation cannot stall every other request.
 */
import {
  type ChatHistoryItem,
  type ChatModelSegment,
  type ChatWrapper,
  type LlamaModel,
  LlamaText,
  SpecialToken,
  SpecialTokensText,
  type Token,
  type Tokenizer,
} from "node-llama-cpp";
import { append } from "../append";
import { InvalidInput } from "../errors";
import { TOKEN_TYPE } from "../gguf/vocab";
import type { PromptImages } from "./images";
import type { TemplateChat } from "./template-chat";
import { cachingTokenizers } from "./token-cache";
import type { ToolSyntax } from "./tool-syntax";
import type { ToolFunction, Turn } from "./types";

export interface FittedPrompt {
  /** The history that fits, oldest turns dropped if needed. */
  turns: readonly Turn[];
  /** The tools the prompt shows the model. */
  tools: readonly ToolFunction[];
  /** `turns` rendered with the chat template, ending with the open assistant turn. */
  text: LlamaText;
  /** `text` tokenized. */
  tokens: Token[];
  /** A prompt as its client wrote it, no chat template (`PromptRenderer.raw`): a reply continues its text. */
  raw?: boolean;
  /** Assembled from its parts' tokens (an infill's): `text` renders them, but is no text a later prompt continues. */
  assembled?: boolean;
}

const REPLACEMENT_CHAR = "\uFFFD";

/**
 * Tokens of remembered runs, ~8 MB: the windows of several conversations, each with a message far
 * longer than the context (16,000 CJK characters are 48,000 tokens of the demo model).
 */
const CACHE_TOKENS = 1 << 20;

/** Whose cache the openings are tokenized in: operator turns and the template, which are no user's. */
const OPENING_SCOPE = "";

/** Tokenizing longer than this at a stretch lets the event loop in before the next run. */
const SLICE_MS = 10;

/** Spelling a token's bytes when a vocabulary lists none (no such GGUF met yet): generous on purpose. */
const UNKNOWN_TOKEN_BYTES = 256;

export class PromptRenderer {
  /** The model's tokenizer for each scope (a user), remembering what it tokenized in that scope. */
  private readonly tokenizers: (scope: string) => Tokenizer;
  /** The most UTF-8 bytes one token of the vocabulary spells. */
  private readonly maxTokenBytes: number;
  /** The chat format has thoughts: stored ones go back to it, and its template decides what the model sees. */
  private readonly thoughts: boolean;
  private readonly openings = new Map<string, readonly Token[]>();
  /** The model's control tokens' texts, longest first: where a template's rendering is cut into runs. */
  private readonly controls: RegExp | undefined;

  constructor(
    private readonly model: LlamaModel,
    private readonly chatWrapper: ChatWrapper,
    /** Renders conversations with tools (the wrapper renders the others). */
    private readonly templateChat: TemplateChat,
    /** Where the model sees pictures: their markers tokenize as the pictures. */
    private readonly images?: PromptImages,
  ) {
    const tokenizers = cachingTokenizers(model.tokenizer, CACHE_TOKENS);
    this.tokenizers = images ? (scope) => images.tokenizer(tokenizers(scope), scope) : tokenizers;
    this.maxTokenBytes = longestTokenBytes(model);
    this.thoughts = chatWrapper.settings.segments?.thought !== undefined;
    this.controls = controlTokensPattern(model);
  }

  /** The tokenizer of `scope` (a user): what another scope tokenized is not found in its cache. */
  tokenizerFor(scope: string): Tokenizer {
    return this.tokenizers(scope);
  }

  /** How the model writes tool calls. */
  get toolSyntax(): ToolSyntax {
    return this.templateChat.syntax;
  }

  /**
   * Characters of history, counted from the newest turn, that a prompt of `tokens` tokens can
   * reach: older turns never fit. A token spells at most `maxTokenBytes` bytes of UTF-8, and a
   * string's length (UTF-16 units) never exceeds its UTF-8 bytes, so the newest turns holding this
   * many characters tokenize to more than `tokens` tokens by themselves; and a prompt keeps a
   * contiguous run of the newest turns, so anything older is always dropped.
   */
  historyChars(tokens: number): number {
    return (tokens + 1) * this.maxTokenBytes;
  }

  /**
   * Fits `turns` (and `tools`, shown whole) into at most `budget` prompt tokens. A history that
   * does not fit whole keeps the most turns that fit in `keep` of the budget (a share of it that
   * leaves room for the turns after), or failing that in the whole budget.
   */
  async fit(turns: readonly Turn[], budget: number, scope: string, tools: readonly ToolFunction[] = [], keep = 1): Promise<FittedPrompt> {
    const reachable = withinReach(turns, this.historyChars(budget));
    const tokenizer = this.tokenizers(scope);
    const render = (kept: readonly Turn[]) => this.render(kept, tools, tokenizer);
    // Whatever comes last (a question, a tool's result, a client's own reply or system message) is
    // the newest turn: it is kept, cut if it must be; leading system turns stay while they fit.
    const newest = reachable.at(-1);
    // One that alone outgrows the budget is cut without tokenizing it whole: a long text is the
    // event loop's longest wait.
    if (!newest || !this.outgrows(newest, budget)) {
      const whole = await render(reachable);
      if (whole.tokens.length <= budget) return whole;
    }
    const cut = newest && (await this.windowOf(reachable, newest, budget, keep, render));
    if (cut) return cut;
    const empty = await render([{ role: "user", content: "" }]);
    // Tools are shown whole: a prompt of them alone that outgrows the room is no prompt to answer.
    if (tools.length > 0 && empty.tokens.length > budget) {
      throw new InvalidInput({ part: "tools" }, `the tools take ${empty.tokens.length} prompt tokens, more than the ${budget} the context leaves for a prompt`);
    }
    return empty;
  }

  /**
   * A prompt as its client wrote it (legacy completions): no chat template; special tokens' texts
   * are those tokens, and the bos (and eos) the model adds to an input are added, as llama-server's
   * `/v1/completions` tokenizes a prompt. Never cut: one that outgrows `budget`, or has no token,
   * is `InvalidInput` naming it.
   */
  async raw(prompt: string, budget: number, scope: string): Promise<FittedPrompt> {
    const { bos, eos, shouldPrependBosToken, shouldAppendEosToken } = this.model.tokens;
    const [first, last] = [shouldPrependBosToken && bos !== null ? [bos] : [], shouldAppendEosToken && eos !== null ? [eos] : []];
    // Known to outgrow the budget from its length alone: refused before a tokenizing that would hold the event loop.
    if (this.outgrows({ role: "user", content: prompt }, budget)) {
      throw new InvalidInput(
        { part: "history" },
        `has more than the ${budget} tokens the context leaves beside the reply's room (its ${Buffer.byteLength(prompt)} bytes make at least ${Math.floor(Buffer.byteLength(prompt) / this.maxTokenBytes)})`,
      );
    }
    const tokens = [...first, ...(await tokenizeRendered(prompt, this.controls, this.tokenizers(scope))), ...last];
    if (tokens.length === 0) throw new InvalidInput({ part: "history" }, "has no token: send some text");
    if (tokens.length > budget) {
      throw new InvalidInput({ part: "history" }, `has ${tokens.length} tokens, more than the ${budget} the context leaves beside the reply's room`);
    }
    const text = LlamaText([
      ...(first.length > 0 ? [new SpecialToken("BOS")] : []),
      new SpecialTokensText(prompt),
      ...(last.length > 0 ? [new SpecialToken("EOS")] : []),
    ]);
    return { turns: [], tools: [], text, tokens, raw: true };
  }

  /**
   * The newest turns of `reachable` that fit (ending with `newest`), starting at a user turn; or
   * `newest` alone with its start cut. Undefined when not even its empty text fits beside the tools.
   */
  private async windowOf(
    reachable: readonly Turn[],
    newest: Turn,
    budget: number,
    keep: number,
    render: (turns: readonly Turn[]) => Promise<FittedPrompt>,
  ): Promise<FittedPrompt | undefined> {
    const pinned = Math.min(leadingSystemCount(reachable), reachable.length - 1);
    const head = reachable.slice(0, pinned);
    const dialogue = reachable.slice(pinned);
    const last = dialogue.length - 1;

    // Start the kept window at a user turn, so the model never sees a reply without its question.
    const starts = dialogue.flatMap((turn, i) => (i > 0 && turn.role === "user" ? [i] : []));
    if (starts.at(-1) !== last) starts.push(last);

    // Fewer turns never render to more tokens, so the earliest fitting start is found by bisection.
    const earliest = async (limit: number) => {
      let lo = 0;
      let hi = starts.length - 1;
      let best: FittedPrompt | undefined;
      while (lo <= hi) {
        const mid = (lo + hi) >> 1;
        const candidate = await render([...head, ...dialogue.slice(starts[mid])]);
        if (candidate.tokens.length <= limit) {
          best = candidate;
          hi = mid - 1;
        } else {
          lo = mid + 1;
        }
      }
      return best;
    };
    if (!this.outgrows(newest, budget)) {
      const best = (keep < 1 ? await earliest(Math.floor(budget * keep)) : undefined) ?? (await earliest(budget));
      if (best) return best;
    }

    // Even the newest turn alone is too long: cut its start, dropping the system prompt only if
    // the two cannot share the context at all.
    return (await this.truncateLast(head, newest, budget, render)) ?? (await this.truncateLast([], newest, budget, render));
  }

  /** `before` plus the end of `turn` that fits; undefined if even its empty text does not fit. */
  private async truncateLast(
    before: readonly Turn[],
    turn: Turn,
    budget: number,
    render: (turns: readonly Turn[]) => Promise<FittedPrompt>,
  ): Promise<FittedPrompt | undefined> {
    const withText = (content: string) => render([...before, { ...turn, content }]);

    const overhead = (await withText("")).tokens.length;
    if (overhead > budget) return undefined;

    const textTokens = await this.lastTokens(turn.content, budget - overhead);
    let keep = Math.min(textTokens.length, budget - overhead);
    while (keep > 0) {
      const candidate = await withText(stripPartialChar(this.model.detokenize(textTokens.slice(-keep), false)));
      const excess = candidate.tokens.length - budget;
      if (excess <= 0) return candidate;
      // Re-tokenizing a cut text can merge differently; shrink by the observed excess and retry.
      keep -= excess;
    }
    return withText("");
  }

  /**
   * At least `count` tokens of the end of `text` (all of it, when it has fewer), tokenized from
   * the shortest tail that has them rather than whole: the first token of a tail that starts
   * inside the text may be a fragment of a longer one, and is left out.
   */
  private async lastTokens(text: string, count: number): Promise<Token[]> {
    for (let chars = 2 * (count + 1); ; chars *= 2) {
      await nextMacrotask();
      if (chars >= text.length) return this.model.tokenize(text, false);
      const tokens = this.model.tokenize(lastChars(text, chars), false);
      if (tokens.length > count + 1) return tokens.slice(1);
    }
  }

  /**
   * Whether the turn's text alone makes more than `tokens` tokens, known without tokenizing it: a
   * token spells at most `maxTokenBytes` bytes (a picture's marker aside, which stands for its
   * layout's positions).
   */
  private outgrows(turn: Turn, tokens: number): boolean {
    const text = this.images ? this.images.withoutMarkers(turn.content) : turn.content;
    return Buffer.byteLength(text) > tokens * this.maxTokenBytes;
  }

  /**
   * The tokens every prompt that begins with `turns` begins with, whatever its user writes next:
   * the template's opening and those turns, up to where the first user text would start. The
   * common part of two renderings with different user texts; remembered per `turns`.
   */
  async opening(turns: readonly Turn[]): Promise<readonly Token[]> {
    const key = JSON.stringify(turns);
    let opening = this.openings.get(key);
    if (opening === undefined) {
      const probe = (content: string) => this.render([...turns, { role: "user", content }], [], this.tokenizers(OPENING_SCOPE));
      const [a, b] = await Promise.all([probe("a"), probe("b")]);
      opening = a.tokens.slice(0, sharedPrefix(a.tokens, b.tokens));
      // Few distinct ones (the operator's system prompt, none): a bound only against misuse.
      if (this.openings.size >= 16) this.openings.clear();
      this.openings.set(key, opening);
    }
    return opening;
  }

  /**
   * The prompt followed by the assistant's `reply`, rendered as the template shows a reply in
   * progress. A template renders a conversation with tools only up to where a reply begins: the
   * reply in progress is the prompt and the reply's text.
   */
  withReply(fitted: Pick<FittedPrompt, "turns" | "tools" | "text" | "raw">, reply: string): LlamaText {
    if (fitted.raw || withTools(fitted.turns, fitted.tools)) return LlamaText([...fitted.text.values, reply]);
    return this.wrapped(fitted.turns, reply);
  }

  private wrapped(turns: readonly Turn[], reply: string): LlamaText {
    const response = reply === "" ? [] : [reply];
    const history = turns.map((turn) => this.historyItem(turn));
    return this.chatWrapper.generateContextState({ chatHistory: [...history, { type: "model", response }] }).contextText;
  }

  /**
   * A turn as node-llama-cpp's history holds it: an assistant's thought as a thought segment of its
   * response, which the wrapper renders as its template does (Qwen3's drops the thoughts of turns
   * before the last user message). A format without thoughts is never given one: its wrapper
   * would render it as plain text.
   */
  private historyItem(turn: Turn): ChatHistoryItem {
    switch (turn.role) {
      case "system":
        return { type: "system", text: turn.content };
      case "user":
      case "tool":
        // A tool's result reaches the wrapper only in a history with tools, which goes to the template.
        return { type: "user", text: turn.content };
      case "assistant": {
        const thought: ChatModelSegment[] =
          this.thoughts && turn.reasoning ? [{ type: "segment", segmentType: "thought", text: turn.reasoning, ended: true }] : [];
        return { type: "model", response: [...thought, turn.content] };
      }
    }
  }

  /**
   * The windows of `turns` that start, after the leading system turns, at a turn equal to `opens`
   * (where an earlier prompt's window started), earliest first, rendered as text only: a
   * conversation cut with slack keeps its window's start while the turns after it fit.
   */
  *windowsFrom(turns: readonly Turn[], tools: readonly ToolFunction[], opens: Turn): Generator<Omit<FittedPrompt, "tokens">> {
    const pinned = leadingSystemCount(turns);
    const wanted = JSON.stringify(opens);
    for (let i = pinned; i < turns.length; i++) {
      if (JSON.stringify(turns[i]) !== wanted) continue;
      const kept = [...turns.slice(0, pinned), ...turns.slice(i)];
      yield {
        turns: kept,
        tools,
        text: withTools(kept, tools) ? LlamaText(new SpecialTokensText(this.templateChat.render(kept, tools))) : this.wrapped(kept, ""),
      };
    }
  }

  private async render(turns: readonly Turn[], tools: readonly ToolFunction[], tokenizer: Tokenizer): Promise<FittedPrompt> {
    if (withTools(turns, tools)) {
      const rendered = this.templateChat.render(turns, tools);
      return { turns, tools, text: LlamaText(new SpecialTokensText(rendered)), tokens: await tokenizeRendered(rendered, this.controls, tokenizer) };
    }
    // The empty model turn renders the assistant's opening, where generation starts.
    const text = this.wrapped(turns, "");
    return { turns, tools, text, tokens: await tokenize(text, tokenizer) };
  }
}

/**
 * A template's rendering tokenized as llama-server tokenizes it (special tokens' texts are those
 * tokens), run by run as `tokenize` does: llama.cpp tokenizes the text between two special tokens
 * on its own, so each run with the control token before it (after which SentencePiece adds its
 * space) tokenizes as the whole would, is remembered, and lets the event loop in between.
 */
async function tokenizeRendered(rendered: string, controls: RegExp | undefined, tokenizer: Tokenizer): Promise<Token[]> {
  const tokens: Token[] = [];
  let sliceStart = performance.now();
  for (const run of runsOf(rendered, controls)) {
    if (performance.now() - sliceStart > SLICE_MS) {
      await nextMacrotask();
      sliceStart = performance.now();
    }
    append(tokens, tokenizer(run, true));
  }
  return tokens;
}

/**
 * `text` tokenized without holding the event loop for long: its runs (the texts between special
 * tokens, each tokenized on its own) go through the remembering tokenizer one by one, with the
 * loop let in whenever a slice of time is used up; `text.tokenize` then assembles the remembered
 * runs the library's way. A new 16,000-character message alone takes tens of ms to tokenize.
 */
async function tokenize(text: LlamaText, tokenizer: Tokenizer): Promise<Token[]> {
  let sliceStart = performance.now();
  let run = "";
  let first = true;
  for (const value of [...text.values, undefined]) {
    if (typeof value === "string") {
      run += value;
      continue;
    }
    if (run !== "") {
      if (performance.now() - sliceStart > SLICE_MS) {
        await nextMacrotask();
        sliceStart = performance.now();
      }
      // As LlamaText.tokenize asks for it, so that it finds the run remembered.
      tokenizer(run, false, first ? undefined : "trimLeadingSpace");
    }
    run = "";
    first = false;
  }
  return text.tokenize(tokenizer);
}

/**
 * `turns` without the older ones a prompt cannot reach (`maxChars`, see `historyChars`), counted
 * back from the newest; leading system turns stay, as fitting keeps them. Answers alone are
 * counted: a thought, where the template keeps it, only adds to a turn, so this reaches far enough.
 * A turn longer than that alone keeps only its last `maxChars` characters: more than the prompt
 * can hold (fitting drops it whole, or keeps the end of the newest), and tokenizing the rest would
 * be work without end on the event loop for a text of any size.
 */
function withinReach(turns: readonly Turn[], maxChars: number): readonly Turn[] {
  const pinned = leadingSystemCount(turns);
  let start = turns.length;
  let chars = 0;
  while (start > pinned && chars < maxChars) chars += turns[--start]!.content.length;
  const reached = start === pinned ? turns : [...turns.slice(0, pinned), ...turns.slice(start)];
  return reached.some((turn) => turn.content.length > maxChars)
    ? reached.map((turn) => (turn.content.length > maxChars ? { ...turn, content: lastChars(turn.content, maxChars) } : turn))
    : reached;
}

/** The last `count` UTF-16 units of `text`, one fewer where the cut would split a surrogate pair. */
function lastChars(text: string, count: number): string {
  const from = text.length - count;
  const code = text.charCodeAt(from);
  return text.slice(code >= 0xdc00 && code <= 0xdfff ? from + 1 : from);
}

/** The texts of the model's control tokens, as one pattern, longest first; undefined if it has none. */
function controlTokensPattern(model: LlamaModel): RegExp | undefined {
  const { tokens, token_type: types } = model.fileInfo.metadata.tokenizer.ggml;
  const controls = tokens.filter((text, i) => (types?.[i] as number | undefined) === TOKEN_TYPE.CONTROL && text !== "");
  if (controls.length === 0) return undefined;
  const escaped = controls.sort((a, b) => b.length - a.length).map((text) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
  return new RegExp(escaped.join("|"), "g");
}

/** `text` cut before each control token's text: the first run, then each control token with the text up to the next. */
function runsOf(text: string, controls: RegExp | undefined): string[] {
  if (controls === undefined) return [text];
  const starts = [0, ...Array.from(text.matchAll(controls), (match) => match.index)];
  return starts.map((start, i) => text.slice(start, starts[i + 1])).filter((run) => run !== "");
}

/** Whether the conversation has tools in it, which the model's template renders (template-chat.ts). */
function withTools(turns: readonly Turn[], tools: readonly ToolFunction[]): boolean {
  return tools.length > 0 || turns.some((turn) => turn.role === "tool" || (turn.toolCalls?.length ?? 0) > 0);
}

/** The first turn of a window after its leading system turns: where a window cut with slack starts. */
export function windowOpener(turns: readonly Turn[]): Turn | undefined {
  return turns[leadingSystemCount(turns)];
}

function leadingSystemCount(turns: readonly Turn[]): number {
  const index = turns.findIndex((turn) => turn.role !== "system");
  return index < 0 ? turns.length : index;
}

/**
 * The longest token in UTF-8 bytes, read from the vocabulary's pieces as the GGUF lists them. A
 * piece never spells fewer bytes than its token's text: SentencePiece writes a space as "▁" (3
 * bytes) and a byte as "<0xE4>", byte-level BPE maps each byte to one character.
 */
function longestTokenBytes(model: LlamaModel): number {
  const pieces: unknown = model.fileInfo.metadata.tokenizer?.ggml?.tokens;
  if (!Array.isArray(pieces) || pieces.length === 0) return UNKNOWN_TOKEN_BYTES;
  let longest = 1;
  for (const piece of pieces) if (typeof piece === "string") longest = Math.max(longest, Buffer.byteLength(piece));
  return longest;
}

/** Resolves after the event loop has had a turn: timers and other requests run in between. */
function nextMacrotask(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** A cut through a multi-token character leaves a replacement character at the start. */
function stripPartialChar(text: string): string {
  let start = 0;
  while (text[start] === REPLACEMENT_CHAR) start++;
  return text.slice(start);
}

/** How many tokens `a` and `b` begin with alike. */
export function sharedPrefix(a: readonly Token[], b: readonly Token[]): number {
  const end = Math.min(a.length, b.length);
  let i = 0;
  while (i < end && a[i] === b[i]) i++;
  return i;
}
