/**
 * The grammars a reply is held to, made once per request's format or tools: a reply format's
 * (json-schema.ts checks the schema, refusing what the grammar cannot enforce, and bounds
 * node-llama-cpp's JSON grammar), or its tool calls' (tools.ts, tool-syntax.ts), from the reply's
 * start when a call must be made, after the call's opener when the model may make one. A model
 * that reasons first thinks freely before a grammar that holds from the start (thought-grammar.ts).
 */
import { type Llama, type LlamaGrammar, LlamaGrammarEvaluationState, type LlamaModel } from "node-llama-cpp";
import { type Field, InvalidInput } from "../errors";
import { boundedJsonGrammar, grammarSchemaOf } from "./json-schema";
import { thoughtThen } from "./thought-grammar";
import type { ThoughtMarkers } from "./thought-text";
import { callsGrammar, type ToolSyntax } from "./tool-syntax";
import { callableFunctions, callSchema } from "./tools";
import type { GenerateRequest, ReplyFormat, Sampling, ToolRequest } from "./types";

/** `json_object`'s schema: one object, any members. */
const ANY_OBJECT = { type: "object", additionalProperties: true } as const;

type Held = Pick<GenerateRequest, "format" | "tools">;

export class ReplyGrammars {
  /** Made once per request: by `check` before a reply starts, used by `hold` after. */
  private readonly grammars = new WeakMap<ReplyFormat | ToolRequest, Promise<LlamaGrammar>>();

  constructor(
    private readonly llama: Llama,
    private readonly model: LlamaModel,
    private readonly syntax: ToolSyntax,
    /** The markers of the model's thought, when it reasons first. */
    private readonly thought: ThoughtMarkers | undefined,
  ) {}

  /** Refuses what cannot be held (`InvalidInput` naming the field), before a reply starts. */
  async check(request: Held): Promise<void> {
    // One grammar holds a reply: a format's from its start, or its calls'.
    if (request.format && request.tools) {
      throw new InvalidInput({ part: "format" }, "a reply format cannot be held beside tools: send one or the other (a tool choice of none drops the tools)");
    }
    await this.grammarOf(request);
  }

  /** `sampling` held to the request's grammar: from the start, or once the model opens a call. */
  async hold(request: Held, sampling: Sampling): Promise<Sampling> {
    const grammar = this.grammarOf(request);
    if (!grammar) return sampling;
    const state = new LlamaGrammarEvaluationState({ model: this.model, grammar: await grammar });
    return request.tools?.choice === "auto" ? { ...sampling, lazyGrammar: { state, armed: false } } : { ...sampling, grammar: state };
  }

  /** Made once per request: `check` makes it (checking every tool's parameters, also when a call is up to the model), `hold` finds it. */
  private grammarOf({ format, tools }: Held): Promise<LlamaGrammar> | undefined {
    const key = tools ?? format;
    if (!key) return undefined;
    let grammar = this.grammars.get(key);
    if (!grammar) {
      grammar = tools ? this.callsGrammar(tools) : this.formatGrammar(format!);
      this.grammars.set(key, grammar);
    }
    return grammar;
  }

  /** Calls of the functions the choice allows: from the reply's start (after a thought), or after the opener the model wrote. */
  private callsGrammar(tools: ToolRequest): Promise<LlamaGrammar> {
    const call = callSchema(callableFunctions(tools), tools.functions, this.syntax.argumentsKey);
    const lazy = tools.choice === "auto";
    return this.jsonGrammar({ part: "tools" }, call, (one) => callsGrammar(this.syntax, one, tools.parallel, lazy), !lazy);
  }

  /**
   * The format's schema; `json_object`'s is any object, as a schema: its grammar bounds the
   * whitespace between values, which the free JSON grammar does not, and a model can loop on it.
   */
  private formatGrammar(format: ReplyFormat): Promise<LlamaGrammar> {
    const field = { part: "format" } as const;
    return this.jsonGrammar(field, format.type === "json_object" ? ANY_OBJECT : grammarSchemaOf(format.schema, field, { strict: format.strict }));
  }

  /**
   * node-llama-cpp's grammar for the schema, bounded, as the answer `shape` makes of it; after a
   * thought for a model that reasons, if it holds `fromStart`. The schema was checked against
   * `SCHEMA_LIMITS`; one that still builds no grammar is the request's fault, refused naming `field`.
   */
  private async jsonGrammar(field: Field, schema: object, shape: (json: string) => string = (json) => json, fromStart = true): Promise<LlamaGrammar> {
    let json: string;
    try {
      // node-llama-cpp types the schema by its literal shape; a schema read from a request has none.
      json = (await this.llama.createGrammarForJsonSchema(schema as never)).grammar;
    } catch (error) {
      throw unbuildable(field, error);
    }
    const answer = shape(boundedJsonGrammar(json));
    if (answer.length > MAX_GRAMMAR_CHARS)
      throw new InvalidInput(field, `the schema makes a grammar of ${answer.length} characters, more than the ${MAX_GRAMMAR_CHARS} Parley builds`);
    try {
      return await this.llama.createGrammar({ grammar: this.thought && fromStart ? thoughtThen(answer, this.thought) : answer });
    } catch (error) {
      throw unbuildable(field, error);
    }
  }
}

/**
 * A grammar's text past which building it (llama.cpp parses it on the event loop's thread) would
 * hold up other requests; schemas within `SCHEMA_LIMITS` stay well below it.
 */
const MAX_GRAMMAR_CHARS = 1 << 20;

/** node-llama-cpp's or llama.cpp's refusal of a grammar, as the request's error. */
function unbuildable(field: Field, error: unknown): InvalidInput {
  const reason = error instanceof Error ? error.message : String(error);
  return new InvalidInput(field, `no grammar can be built from the schema (${reason.slice(0, 300)})`);
}
