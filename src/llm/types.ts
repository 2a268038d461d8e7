/** The engine's public vocabulary: what the chat service sends in and gets back. */
import type { LlamaGrammarEvaluationState } from "node-llama-cpp";
import type { ConversationRole, FinishReason } from "../vocabulary";
import type { Infill } from "./infill";
import type { StopWhen } from "./line-stop";
import type { ToolCall, ToolRequest } from "./tools";

export type { FinishReason } from "../vocabulary";
export type { StopWhen } from "./line-stop";
export type { ToolCall, ToolChoice, ToolFunction, ToolRequest } from "./tools";

/** `tool`: a tool's result, answering an assistant turn's call. */
export type Role = "system" | ConversationRole | "tool";

export interface Turn {
  role: Role;
  content: string;
  /** An assistant turn's thought, apart from its answer: the chat template decides whether the model sees it again. */
  reasoning?: string;
  /** An assistant turn's calls of tools, after its content. */
  toolCalls?: readonly ToolCall[];
  /** A tool turn: the id of the call it answers, and the function's name. */
  toolCallId?: string;
  name?: string;
  /** A user turn's pictures, each where it stands in `content`. */
  images?: readonly TurnImage[];
}

/** A picture in a turn: its file's bytes (PNG, JPEG, BMP, GIF), before the character `at` of the turn's content. */
export interface TurnImage {
  data: Uint8Array;
  at: number;
}

/**
 * How the engine reports a reasoning model's thought: `separate` from the answer, `hide` it (the
 * answer alone leaves the engine), or `inline`, left in the answer with its markers as generated.
 */
export const REASONING_MODES = ["separate", "hide", "inline"] as const;

/** Flash attention: "auto" lets the engine choose per measurement (see engine.ts). */
export const FLASH_ATTENTION_MODES = ["auto", "on", "off"] as const;

export type FlashAttentionMode = (typeof FLASH_ATTENTION_MODES)[number];

/** The type of the KV cache's keys and values, as llama-server's `-ctk`/`-ctv` name it: 16-bit, or ggml's 8- or 4-bit blocks. */
/** The GPU backends Parley's natives can be compiled for (`bun run natives --gpu`). */
export type GpuBackend = "cuda";

export const KV_TYPES = ["f16", "q8_0", "q4_0"] as const;

export type KvType = (typeof KV_TYPES)[number];

/** A context's options for the KV type: none for f16, llama.cpp's default. */
export const kvCacheTypes = (kvType: KvType = "f16") =>
  kvType === "f16"
    ? {}
    : { experimentalKvCacheKeyType: kvType.toUpperCase() as "Q8_0" | "Q4_0", experimentalKvCacheValueType: kvType.toUpperCase() as "Q8_0" | "Q4_0" };

export type ReasoningMode = (typeof REASONING_MODES)[number];

/**
 * How a reply's tokens are drawn when its request does not say: the one statement of the sampling
 * policy, for every protocol (a protocol with defaults of its own, as OpenAI's temperature of 1,
 * sets them in its request). The penalties are neutral unless asked for; they count the last
 * `penaltyWindow` tokens of the reply, as llama-server's `repeat_last_n` does.
 */
export const SAMPLING_DEFAULTS = { topK: 40, topP: 0.95, minP: 0, repeatPenalty: 1, presencePenalty: 0, frequencyPenalty: 0, penaltyWindow: 64 } as const;

/** Penalties on tokens the reply has generated: llama.cpp's penalties sampler. */
export interface Penalties {
  /** Divides a repeated token's positive logit (multiplies a negative one); 1 = none. */
  repeat: number;
  /** Subtracted once from the logit of a token that appeared. */
  presence: number;
  /** Subtracted from a token's logit per time it appeared. */
  frequency: number;
  /** The last tokens counted. */
  window: number;
}

/** What draws a reply's tokens, every choice made: see `samplingOf`. */
export interface Sampling {
  /** 0 = greedy. */
  temperature: number;
  topK: number;
  topP: number;
  minP: number;
  /** Drawn at random per request when the request has none. */
  seed: number;
  /** Absent when all are neutral. */
  penalties?: Penalties;
  /** Added to these tokens' logits before sampling (-100 bans a token in practice, 100 all but forces it). */
  logitBias?: ReadonlyMap<number, number>;
  /**
   * llama.cpp's infill sampler, last before the draw (as llama-server's chain has it when a request
   * names it last): a code model's tokens that begin one another pooled, and the completion ended
   * once its end is likely enough. A greedy draw takes the most likely token, as it would anyway.
   */
  infillSampler?: true;
  /** Only tokens that keep the reply within the grammar (a `ReplyFormat`); the reply's own state of it. */
  grammar?: LlamaGrammarEvaluationState;
  /**
   * A grammar the reply is held to once it is `armed`, from the next token on: a tool call's, armed
   * by decoding when the model has written the call's opener (as llama-server's lazy grammars).
   */
  lazyGrammar?: { readonly state: LlamaGrammarEvaluationState; armed: boolean };
}

/** What a reply must be: one JSON object, or JSON valid against a schema (json-schema.ts says which schemas). */
/** A reply held to JSON: any object, or one a schema describes (`strict`: every keyword enforced or refused; else those the grammar cannot hold are advisory). */
export type ReplyFormat = { type: "json_object" } | { type: "json_schema"; schema: unknown; strict: boolean };

/** What a request may say of its sampling. */
export type SamplingRequest = Pick<
  GenerateRequest,
  "temperature" | "topP" | "topK" | "minP" | "seed" | "repeatPenalty" | "presencePenalty" | "frequencyPenalty" | "penaltyWindow" | "logitBias" | "infillSampler"
>;

/**
 * The request's sampling, the defaults filling in what it leaves out. `contextSize` bounds the
 * penalties' window: a reply has no more tokens than that, and the sampler keeps room for the window.
 */
export function samplingOf(request: SamplingRequest, contextSize = Number.POSITIVE_INFINITY): Sampling {
  const penalties: Penalties = {
    repeat: request.repeatPenalty ?? SAMPLING_DEFAULTS.repeatPenalty,
    presence: request.presencePenalty ?? SAMPLING_DEFAULTS.presencePenalty,
    frequency: request.frequencyPenalty ?? SAMPLING_DEFAULTS.frequencyPenalty,
    window: Math.min(request.penaltyWindow ?? SAMPLING_DEFAULTS.penaltyWindow, contextSize),
  };
  const neutral = (penalties.repeat === 1 && penalties.presence === 0 && penalties.frequency === 0) || penalties.window === 0;
  const bias = Object.entries(request.logitBias ?? {});
  return {
    temperature: request.temperature,
    topK: request.topK ?? SAMPLING_DEFAULTS.topK,
    topP: request.topP ?? SAMPLING_DEFAULTS.topP,
    minP: request.minP ?? SAMPLING_DEFAULTS.minP,
    // node-llama-cpp's own default is the current second: two requests in one second would share it.
    seed: request.seed ?? crypto.getRandomValues(new Uint32Array(1))[0]!,
    ...(neutral ? {} : { penalties }),
    ...(bias.length > 0 ? { logitBias: new Map(bias.map(([token, value]) => [Number(token), value])) } : {}),
    ...(request.infillSampler ? { infillSampler: true } : {}),
  };
}

/**
 * A request's prompt fitted by `Engine.measure`, with its pictures held: `tokens` long. Handed to
 * `generate` with the same request, it is evaluated as it is; release it if no generation takes it.
 */
export interface Measured {
  readonly tokens: number;
  release(): void;
}

export interface GenerateRequest {
  /**
   * Stable per conversation: the engine prefers the sequence whose KV cache already holds it.
   * Absent for a stateless prompt (the client sends the whole history each time): the engine
   * then picks the free sequence sharing the longest token prefix with it.
   */
  conversationKey?: string;
  /**
   * The conversation of `conversationKey` starts with this request: no sequence or saved state
   * holds it yet, so its sequence is chosen by the prompt's tokens, as a stateless prompt's is (a
   * new chain of kept responses reuses its user's cached prefix as chat completions do).
   */
  startsConversation?: boolean;
  /**
   * Whose request this is (the user): a request reuses KV state (a sequence's cached prefix, a
   * saved state) made by requests of its own scope only. Of another scope's it reuses only the
   * opening every prompt starting with the same `publicTurns` has, so that no user can learn
   * from cached tokens or timing what another user sent.
   */
  cacheScope: string;
  /** The history's first turns that are the operator's (a system prompt), the same for every scope. Default 0. */
  publicTurns?: number;
  /**
   * The history, the new user message last. Turns further back than `Engine.historyChars`
   * characters can never fit the prompt: leaving them out changes nothing.
   */
  history: Turn[];
  /**
   * Instead of a history, a prompt as its client wrote it (legacy completions): no chat template,
   * and the reply is its continuation, raw text (no thought split, no tool calls, only the
   * request's stop strings). The history is then empty; no conversation key, format or tools.
   */
  raw?: string;
  /**
   * Instead of a history, what a completion fills in between (`infill.ts`): the prompt the model's
   * FIM tokens frame, and the reply continues it as a raw prompt's does.
   */
  infill?: Infill;
  /** 0 = greedy. */
  temperature: number;
  /** Nucleus sampling: only the most likely tokens whose probabilities add up to this (default: `SAMPLING_DEFAULTS`). */
  topP?: number;
  /** Only the this many most likely tokens; 0 = all. */
  topK?: number;
  /** Only tokens at least this fraction as likely as the most likely one. */
  minP?: number;
  /** See `Penalties`. */
  repeatPenalty?: number;
  presencePenalty?: number;
  frequencyPenalty?: number;
  /** The last this many reply tokens are what the penalties count (0: none); default `SAMPLING_DEFAULTS.penaltyWindow`, at most the context. */
  penaltyWindow?: number;
  /** Token id → value added to its logit. A token the model does not have is `InvalidInput` (the token bias). */
  logitBias?: Readonly<Record<number, number>>;
  /** llama.cpp's infill sampler before the draw: tokens that begin one another pooled, the end taken once likely (see `Sampling`). */
  infillSampler?: boolean;
  maxTokens: number;
  /**
   * The request's own context, when smaller than the model's: its prompt is fitted to this many
   * tokens (less the reply's room) as it is to the whole context otherwise, the oldest turns left
   * out first. Larger than the model's context, the model's applies.
   */
  contextTokens?: number;
  /**
   * Prompt and reply tokens together, at most: the reply ends (`length`) where they reach it, and a
   * prompt that leaves no reply token is refused (`BudgetExceeded`) before it is evaluated.
   */
  budget?: number;
  /** The reply ends where one of these texts begins; the stop text is not part of it. */
  stop?: readonly string[];
  /** Conditions on the answer's lines that end it early (line-stop.ts); a reply they end finishes as `length`, cut short as a limit cuts it. */
  stopWhen?: StopWhen;
  /**
   * A reasoning model's thought, at most this many tokens: its close marker then follows as if the
   * model wrote it, and the answer after it (0: the thought closes as it opens). Absent: as long as
   * the model thinks. `Engine.check` refuses a budget above 0 for a model whose thoughts are not
   * told apart.
   */
  thoughtTokens?: number;
  /** Held to it token by token: see `Engine.check`, which refuses what cannot be held. */
  format?: ReplyFormat;
  /** Tools the reply may call (see tools.ts); `Engine.check` refuses what cannot be held. */
  tools?: ToolRequest;
  /** Each answer token's log-probability and this many (0 to 20) most likely tokens' (`logprobs` pieces). */
  logprobs?: number;
  /** Drawn at random per request when absent (node-llama-cpp's default is the current second). */
  seed?: number;
  signal?: AbortSignal;
  /** This request's prompt as `Engine.measure` fitted it: generation takes it instead of fitting it again. */
  measured?: Measured;
}

export interface GenerateResult {
  /** The answer: exactly the concatenation of the yielded content pieces. */
  text: string;
  /** The thought, exactly the concatenation of the yielded reasoning pieces; absent when there were none. */
  reasoning?: string;
  finishReason: FinishReason;
  /** The request's stop string that ended the reply, when one did (not the chat format's own). */
  stopSequence?: string;
  /** Tokens of the whole prompt the reply was conditioned on, history included. */
  promptTokens: number;
  /** Of `promptTokens`, how many were reused from the sequence's KV cache. */
  cachedTokens: number;
  /** Tokens the model generated for the reply; the end-of-generation token is not counted. */
  completionTokens: number;
  /** Of `completionTokens`, the thought's: up to and including the one that closed it (all, when the reply ended in it). */
  reasoningTokens: number;
  /** The prompt as evaluated (after trimming to fit the context), special tokens rendered as text. */
  prompt: string;
  /** The tools the reply called, after its `text`; absent when it called none. */
  toolCalls?: ToolCall[];
  /** Asked for: the answer's tokens' log-probabilities, those of its whole `text`. */
  logprobs?: TokenLogprob[];
}

/** A piece of a reply's text: its answer, or the model's reasoning (a thought) before it. */
export interface TextPiece {
  kind: "content" | "reasoning";
  text: string;
}

/**
 * A part of a call of a tool the reply makes, after its content: opened (its id and name), its
 * arguments' text in pieces (together, the call's `arguments`), closed (the whole call).
 */
export type ToolCallPart =
  | { part: "open"; index: number; id: string; name: string }
  | { part: "arguments"; index: number; text: string }
  | { part: "close"; index: number; call: ToolCall };

export interface ToolCallPiece {
  kind: "toolCall";
  part: ToolCallPart;
}

/** A token as a client sees it: its text (U+FFFD for the piece of a character it may be) and its bytes. */
export interface SpelledToken {
  token: string;
  bytes: number[];
  logprob: number;
}

/** A token of the reply's answer with its log-probability, and the most likely tokens' at its place. */
export interface TokenLogprob extends SpelledToken {
  top: SpelledToken[];
}

/** The log-probabilities of answer tokens whose text has been shown, in order. */
export interface LogprobsPiece {
  kind: "logprobs";
  entries: TokenLogprob[];
}

/** The prompt as it is evaluated, once, before the reply's first piece: its tokens, and of them those the sequence already held. */
export interface PromptPiece {
  kind: "prompt";
  tokens: number;
  cachedTokens: number;
}

export type ReplyPiece = TextPiece | ToolCallPiece | LogprobsPiece | PromptPiece;

/**
 * What a conversation's turn does once its history outgrows the context and its oldest turns are
 * dropped. `shift`: the sequence drops those turns' cells and shifts the rest down (llama.cpp's
 * context shift), evaluating only the new turn; the kept turns' cells were computed while the
 * dropped ones preceded them, so the reply can differ from a fresh evaluation of the same window.
 * `slack`: the window is cut to a share of the room (`contextSlack`) and evaluated afresh, then
 * kept where it starts while the turns after it fit, each evaluating only its new part: exact, one
 * turn in several paying for a whole (smaller) window. `exact`: the fewest oldest turns are
 * dropped, and the kept window is evaluated afresh, as a new server would, every turn.
 */
export const CONTEXT_OVERFLOW_MODES = ["shift", "slack", "exact"] as const;
export type ContextOverflow = (typeof CONTEXT_OVERFLOW_MODES)[number];

/**
 * How the ends of prompts ready at once are evaluated. `shortest`: one a batch, shortest first;
 * the first replies start sooner (the sum of their times to first token falls, the last reply
 * ends no later), then pause while the later prompts are evaluated. `together`: in one batch, as
 * llama-server does; every new reply gets its first token once all of them are evaluated, and
 * then they all stream evenly. `auto`: `together` where every layer runs on a GPU, whose batch
 * costs about one read of the weights whatever its tokens (so one batch for all the ends beats
 * one each on every count), else `shortest` (the scheduler says why).
 */
export const PROMPT_ENDS_MODES = ["auto", "shortest", "together"] as const;
export type PromptEnds = (typeof PROMPT_ENDS_MODES)[number];

/** `auto` resolved for where the model's repeating layers (`layers`, its output layer aside) run. */
export function promptEndsFor(mode: PromptEnds, gpuLayers: number, layers: number): Exclude<PromptEnds, "auto"> {
  if (mode !== "auto") return mode;
  return gpuLayers > 0 && gpuLayers >= layers ? "together" : "shortest";
}

/**
 * Speculative decoding: whether replies' steps verify tokens guessed from their own sequence
 * (prompt lookup). `auto`: where it pays (see draft-length.ts); `lookup`: at least a token in every
 * step with a guess; `off`: never.
 */
export const SPECULATE_MODES = ["auto", "lookup", "draft", "off"] as const;
export type Speculate = (typeof SPECULATE_MODES)[number];

/**
 * Reply tokens a prompt of `promptTokens` leaves room for: `maxTokens`, within what the context has
 * left (one token stays free at its end), and at least 1, so a full context still answers.
 */
export const replyRoom = (maxTokens: number, contextSize: number, promptTokens: number) => Math.max(1, Math.min(maxTokens, contextSize - promptTokens - 1));

/** A prompt that leaves no reply token of its request's `budget`: nothing was evaluated. */
export class BudgetExceeded extends Error {
  constructor(
    readonly promptTokens: number,
    readonly budget: number,
  ) {
    super(`the prompt's ${promptTokens} tokens leave no reply token of a budget of ${budget}`);
  }
}
