/**
 * Tools that run inside the service: a turn offered the tools of listed MCP servers runs the
 * loop itself. Each server's tools are listed (once per chain), offered to the model beside the
 * client's functions, and every call the model writes of one is made on its server (or, where the
 * request asks, asked of the client first) and its result fed back as the next model turn's, up
 * to `STEP_LIMIT` model turns. The items it makes are the response's; what the protocol calls
 * them is its own business.
 */
import type { ConversationItem, ServerCallError } from "../db/types";
import { DependencyFailed, InvalidInput } from "../errors";
import type { ToolCall, ToolFunction, ToolRequest } from "../llm/tools";
import type { CallOutcome, ListedTool } from "../mcp/connection";
import type { Caller, McpServers, OpenedServer } from "../mcp/servers";

export type { Caller };

import type { CompletionResult, CompletionStart } from "./completions";
import { replyItemId, replyItems, stepStem } from "./items";
import { NO_USAGE, type TurnEvent, type Usage } from "./turn-runner";

/**
 * The model turns one response may take: the last is offered no server's tools, so it answers
 * with what the calls before it brought.
 */
export const STEP_LIMIT = 8;

/** One server's tools as a request offers them. */
export interface ServerToolUse {
  /** Its place among the request's tools, for a refusal to name. */
  index: number;
  label: string;
  /** The URL the request gives, which must be the listed server's. */
  url?: string;
  /** Headers the request adds to the server's requests. */
  headers: Record<string, string>;
  /** Of the server's tools, only these; absent, all. */
  allowedTools?: readonly string[];
  /** Whether a call of a tool waits for the client's approval: the default, and the tools excepted from it. */
  approval: { always: boolean; except: readonly string[] };
}

export interface ServerTools {
  uses: readonly ServerToolUse[];
  caller: Caller;
  /** The first model turn must call a server's tool: the one named (of this server, if given), or any. */
  choice?: { server?: string; name?: string };
  /** The request's choice is that no tool be called: the servers are listed and approved calls made, but nothing is offered. */
  none?: boolean;
}

/** A turn's result with the items the loop made, in order (what the protocol shows as its output). */
export interface LoopResult extends CompletionResult {
  items: ConversationItem[];
}

/** A model turn's events: its `start` (what the caller's turns start with), its pieces, its result. */
type StepEvents<Start> = AsyncGenerator<Start | TurnEvent, CompletionResult | undefined, void>;

export interface LoopInput<Start extends { type: "start" } = CompletionStart> {
  servers: McpServers;
  tools: ServerTools;
  /** The client's own functions and choice, if any. */
  functions: ToolRequest | undefined;
  /** The response's item stem. */
  stem: string;
  /** The items of the response this one continues (its tool lists, its approval requests). */
  known: readonly ConversationItem[];
  /** This request's input items (its answers to approval requests). */
  input: readonly ConversationItem[];
  signal?: AbortSignal;
  /** One model turn, given the loop's items so far and the tools it offers. */
  step: (items: readonly ConversationItem[], tools: ToolRequest | undefined, first: boolean) => StepEvents<Start>;
}

interface Offered {
  server: OpenedServer;
  use: ServerToolUse;
  tool: ListedTool;
}

/** Runs the loop: yields the first model turn's `start`, then every turn's pieces and the server items as they come. */
export async function* serverToolLoop<Start extends { type: "start" }>(
  input: LoopInput<Start>,
): AsyncGenerator<Start | TurnEvent, LoopResult | undefined, void> {
  const { tools, stem, signal } = input;
  const opened: OpenedServer[] = [];
  try {
    for (const use of tools.uses) opened.push(input.servers.open(use, tools.caller));
    const offered = await offeredTools(opened, tools.uses, input.functions);
    const choice = firstChoice(tools.choice, offered, input.functions);
    const listedBefore = new Set(input.known.flatMap((item) => (item.type === "toolList" && item.error === undefined ? [item.server] : [])));
    const items: ConversationItem[] = opened.flatMap((server, j): ConversationItem[] =>
      listedBefore.has(server.label)
        ? []
        : [{ type: "toolList", id: replyItemId(stem, "toolList", j), server: server.label, tools: [...listedOf(offered, server.label)] }],
    );
    for (const item of await approved(input, offered)) items.push(item);
    const announced = items.length;
    let usage = NO_USAGE;
    let result: CompletionResult | undefined;
    for (let step = 0; step < STEP_LIMIT; step++) {
      const before = result;
      const last = step === STEP_LIMIT - 1;
      const request = requestOf(input.functions, last || tools.none ? [] : [...offered.values()], step === 0 ? choice : undefined);
      const events = input.step(items, request, step === 0);
      const calls = new Map<number, Offered>();
      try {
        for (;;) {
          const next = await events.next();
          if (next.done) {
            result = next.value;
            break;
          }
          const event = next.value;
          if (event.type === "start") {
            if (step > 0) continue;
            yield event;
            for (const item of items.slice(0, announced)) yield { type: "serverTool", event: "item", item };
            continue;
          }
          if (step > 0 && event.type === "prompt") continue;
          if (event.type !== "toolCall") {
            yield event;
            continue;
          }
          const { part } = event;
          const called = part.part === "open" ? offered.get(part.name) : calls.get(part.index);
          if (!called) {
            yield event;
            continue;
          }
          calls.set(part.index, called);
          yield { type: "serverTool", event: "call", part, server: called.server.label, approval: needsApproval(called) };
        }
      } finally {
        await events.return(undefined);
      }
      // A client that left between two turns leaves the response cancelled with the calls it made.
      if (result === undefined) return before && { ...before, finishReason: "cancelled", usage, items };
      usage = added(usage, result.usage);
      const made = stepItems(stepStem(stem, step), result, offered);
      for (const item of made) {
        if (item.type !== "serverCall") {
          items.push(item);
          continue;
        }
        const done = await called(offered.get(item.name)!, item, signal);
        items.push(done);
        yield { type: "serverTool", event: "item", item: done };
      }
      const ranAll = made.some((item) => item.type === "serverCall") && !made.some((item) => item.type === "toolCall" || item.type === "approvalRequest");
      if (result.finishReason !== "stop" || !ranAll || last) break;
      yield { type: "serverTool", event: "step", step: step + 1 };
    }
    return result && { ...result, usage, items };
  } finally {
    await Promise.all(opened.map((server) => server.release()));
  }
}

/** Every server's tools the request allows, by the name the model calls them; a down server is `DependencyFailed`. */
async function offeredTools(
  opened: readonly OpenedServer[],
  uses: readonly ServerToolUse[],
  functions: ToolRequest | undefined,
): Promise<Map<string, Offered>> {
  const offered = new Map<string, Offered>();
  const taken = new Set((functions?.functions ?? []).map((fn) => fn.name));
  for (const [j, server] of opened.entries()) {
    const use = uses[j]!;
    let listed: ListedTool[];
    try {
      listed = await server.connection.tools();
    } catch (error) {
      throw new DependencyFailed(`MCP server ${JSON.stringify(server.label)} did not list its tools: ${(error as Error).message ?? String(error)}`);
    }
    for (const tool of listed) {
      if (use.allowedTools !== undefined && !use.allowedTools.includes(tool.name)) continue;
      if (taken.has(tool.name))
        throw new InvalidInput(
          { part: "serverTool", index: use.index, detail: "allowedTools" },
          `MCP server ${JSON.stringify(server.label)}'s tool ${JSON.stringify(tool.name)} has the name of another tool offered: leave one out with allowed_tools`,
        );
      taken.add(tool.name);
      offered.set(tool.name, { server, use, tool });
    }
  }
  return offered;
}

function* listedOf(offered: Map<string, Offered>, label: string) {
  for (const { server, tool } of offered.values()) if (server.label === label) yield tool;
}

/** The first turn's choice: a server's tool (named, or any), else the client's. */
function firstChoice(choice: ServerTools["choice"], offered: Map<string, Offered>, functions: ToolRequest | undefined): ToolRequest["choice"] {
  if (!choice) return functions?.choice ?? "auto";
  if (choice.name === undefined) return "required";
  const chosen = offered.get(choice.name);
  if (!chosen || (choice.server !== undefined && chosen.server.label !== choice.server))
    throw new InvalidInput(
      { part: "toolChoice" },
      `${choice.server === undefined ? "no MCP server offers" : `MCP server ${JSON.stringify(choice.server)} offers no`} tool ${JSON.stringify(choice.name)} to this request`,
    );
  return { name: choice.name };
}

/** The engine's tools for one model turn: the client's functions and the servers' tools; after the first turn the model chooses. */
function requestOf(functions: ToolRequest | undefined, offered: readonly Offered[], choice: ToolRequest["choice"] | undefined): ToolRequest | undefined {
  const own = functions?.functions ?? [];
  const all: ToolFunction[] = [
    ...own,
    ...offered.map(({ tool }) => ({
      name: tool.name,
      ...(tool.description !== undefined ? { description: tool.description } : {}),
      parameters: tool.inputSchema,
      // A server's schema may use what a grammar cannot hold: advisory there, as the server checks its arguments itself.
      strict: false,
    })),
  ];
  if (all.length === 0) return undefined;
  return { functions: all, choice: choice ?? "auto", parallel: functions?.parallel ?? true };
}

const needsApproval = ({ use, tool }: Offered) => use.approval.always !== use.approval.except.includes(tool.name);

/** A model turn's items: a call of a server's tool is made (`serverCall`, its result to come) or asked (`approvalRequest`). */
const stepItems = (stem: string, result: CompletionResult, offered: Map<string, Offered>) =>
  replyItems(stem, result, (call: ToolCall, id): ConversationItem | undefined => {
    const server = offered.get(call.name);
    if (!server) return undefined;
    const base = { server: server.server.label, name: call.name, arguments: call.arguments };
    return needsApproval(server)
      ? { type: "approvalRequest", id: id("approvalRequest"), ...base }
      : { type: "serverCall", id: id("serverCall"), ...base, output: null, error: null };
  });

/** The call made: its output, or why it has none. */
async function called(
  { server }: Offered,
  item: Extract<ConversationItem, { type: "serverCall" }>,
  signal: AbortSignal | undefined,
): Promise<Extract<ConversationItem, { type: "serverCall" }>> {
  let args: unknown;
  try {
    args = JSON.parse(item.arguments);
  } catch {
    args = undefined;
  }
  const outcome: CallOutcome =
    typeof args === "object" && args !== null && !Array.isArray(args)
      ? await server.call(item.name, args as Record<string, unknown>, signal)
      : { error: { kind: "protocol", code: -32602, message: "the call's arguments are not a JSON object" } };
  return { ...item, output: outcome.output ?? null, error: (outcome.error as ServerCallError | undefined) ?? null };
}

/**
 * The calls the input approves, made now (each answers a request of the response continued, or
 * one the input gives back); a refused one is left for the model to read.
 */
async function approved(input: Pick<LoopInput, "known" | "input" | "stem" | "signal">, offered: Map<string, Offered>): Promise<ConversationItem[]> {
  const items: ConversationItem[] = [];
  for (const [i, entry] of input.input.entries()) {
    if (entry.type !== "approvalResponse") continue;
    const asked = [...input.known, ...input.input].find((item) => item.type === "approvalRequest" && item.id === entry.approvalRequestId);
    if (asked?.type !== "approvalRequest")
      throw new InvalidInput(
        { part: "history", item: i },
        `answers no approval request of the response it continues or of its input (${JSON.stringify(entry.approvalRequestId)})`,
      );
    if (!entry.approve) continue;
    const tool = offered.get(asked.name);
    if (tool?.server.label !== asked.server)
      throw new InvalidInput(
        { part: "history", item: i },
        `approves a call of MCP server ${JSON.stringify(asked.server)}'s ${JSON.stringify(asked.name)}, which this request's tools do not offer`,
      );
    const item = {
      type: "serverCall" as const,
      id: replyItemId(input.stem, "serverCall", `a${items.length}`),
      server: asked.server,
      name: asked.name,
      arguments: asked.arguments,
      output: null,
      error: null,
      approvalRequestId: asked.id,
    };
    items.push(await called(tool, item, input.signal));
  }
  return items;
}

const added = (a: Usage, b: Usage): Usage => ({
  promptTokens: a.promptTokens + b.promptTokens,
  completionTokens: a.completionTokens + b.completionTokens,
  cachedTokens: a.cachedTokens + b.cachedTokens,
  reasoningTokens: a.reasoningTokens + b.reasoningTokens,
});
