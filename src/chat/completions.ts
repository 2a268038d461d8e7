import type { FinishReason, ReplyFormat, SamplingRequest, ToolCall, ToolRequest, Turn } from "../llm/engine";
import { type TurnDelta, type TurnReasoning, type TurnRunner, type TurnToolCall, type Usage, usageOf } from "./turn-runner";

export interface CompletionInput {
  /** Whose request: only this user's earlier requests' KV state is reused. */
  userId: number;
  /** The whole conversation, as the client keeps it. */
  messages: Turn[];
  sampling: SamplingRequest;
  format?: ReplyFormat;
  /** Tools the reply may call. */
  tools?: ToolRequest;
  /** Absent: as long as the context allows. */
  maxTokens?: number;
  stop?: readonly string[];
  signal?: AbortSignal;
}

export interface CompletionStart {
  type: "start";
  model: string;
}

export interface CompletionResult {
  text: string;
  /** A reasoning model's thought; absent for other models. */
  reasoning?: string;
  finishReason: FinishReason;
  /** The tools the reply called, after its text; absent when it called none. */
  toolCalls?: ToolCall[];
  usage: Usage;
  model: string;
}

/** The model that answers, for listings. */
export interface ModelInfo {
  id: string;
  /** Unix seconds. */
  loadedAt: number;
}

/**
 * A stateless completion: the client sends the history, nothing is stored. Admission, the
 * generation cap, cancellation and shutdown are the turn runner's, as for stored conversations;
 * the engine reuses whatever prefix of the prompt a sequence still holds from the same user.
 */
export class CompletionService {
  constructor(private readonly runner: TurnRunner) {}

  /** Undefined while the model is still loading. */
  model(): ModelInfo | undefined {
    const engine = this.runner.engines.current();
    return engine && { id: engine.modelName, loadedAt: engine.loadedAt };
  }

  /** Yields `start` once admitted, then `reasoning` pieces, `delta`s and tool calls; undefined when the client left before generation began. */
  async *complete(input: CompletionInput): AsyncGenerator<CompletionStart | TurnReasoning | TurnDelta | TurnToolCall, CompletionResult | undefined, void> {
    const running = this.runner.begin(input.signal);
    try {
      const { engine } = running;
      await engine.check({ ...input.sampling, format: input.format, tools: input.tools });
      yield { type: "start", model: engine.modelName };
      const result = yield* running.reply({
        cacheScope: String(input.userId),
        history: input.messages,
        ...input.sampling,
        format: input.format,
        tools: input.tools,
        maxTokens: input.maxTokens ?? engine.contextSize,
        stop: input.stop,
      });
      return (
        result && {
          text: result.text,
          ...(result.reasoning !== undefined ? { reasoning: result.reasoning } : {}),
          finishReason: result.finishReason,
          ...(result.toolCalls ? { toolCalls: result.toolCalls } : {}),
          usage: usageOf(result),
          model: engine.modelName,
        }
      );
    } finally {
      running.end();
    }
  }
}
