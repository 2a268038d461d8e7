/**
 * The loop of server tools at its edges (issue #68), on the native chat API: a model that calls a
 * tool every turn it may (a bias on its call opener) is stopped at the documented step limit, its
 * last turn offered no tool and so answering in words; a client that leaves while a call runs
 * leaves its turn stored, cancelled, with the call, and its conversation free for the next turn.
 */
import { beforeAll, describe, expect, test } from "bun:test";
import { STEP_LIMIT } from "../../src/chat/server-tools";
import { readGgufHeader } from "../../src/gguf/reader";
import type { ChatReply, ChatToolCallStart } from "../../src/http/contract";
import { allowSlowTests, bearer, postChat, presetModel, readSse, until } from "../support";
import { servedWithMcp } from "../support/mcp";

allowSlowTests();

const { app, tools } = servedWithMcp("mcp-loop");
/** The demo model's call opener, which a bias makes it write whenever a tool is offered. */
let opener: number;

beforeAll(async () => {
  const tokens = readGgufHeader(await presetModel("demo")).metadata["tokenizer.ggml.tokens"] as { items: readonly string[] };
  opener = tokens.items.indexOf("<tool_call>");
});

const get = async <T>(path: string) => (await (await fetch(`${app.served.url}${path}`, { headers: bearer(app.key) })).json()) as T;

/** The model turn a call's id names: its step's stem is the turn's (`mcp_<stem>_s<step>_<i>`; the first turn's has no step). */
const stepOf = (id: string) => Number(/_s(\d+)_\d+$/.exec(id)?.[1] ?? 0);

describe("the loop of server tools at its edges", () => {
  test(`a model that calls every turn it may: ${STEP_LIMIT} model turns, the last offered no tool and answering in words`, async () => {
    expect(opener).toBeGreaterThan(0);
    const response = await postChat(app.served.url, app.key, {
      conversation_id: "loop-limit",
      message: "What is the weather in Paris?",
      tools: ["weather"],
      tool_choice: { name: "lookup" },
      logit_bias: { [opener]: 100 },
      temperature: 0,
      max_tokens: 96,
      stream: true,
    });
    expect(response.status).toBe(200);
    const events: { event: string; data: unknown }[] = [];
    for await (const event of readSse(response)) if (event.event !== "comment") events.push(event);
    const done = events.at(-1)!;
    expect(done.event).toBe("done");
    const reply = done.data as ChatReply;
    const calls = reply.tool_calls ?? [];
    // Every turn but the last called; the last could not.
    expect([...new Set(calls.map((call) => stepOf(call.id)))]).toEqual(Array.from({ length: STEP_LIMIT - 1 }, (_, step) => step));
    const written = events.flatMap((event) => (event.event === "tool_call" ? [(event.data as ChatToolCallStart).id] : []));
    expect(written).toEqual(calls.map((call) => call.id));
    expect(reply.message.content).toMatch(/\w/);
    expect(reply.message.content).not.toContain("<tool_call>");
    // Every model turn's tokens are the reply's.
    expect(reply.usage.completion_tokens).toBeGreaterThan(STEP_LIMIT);
  });

  test("a client that leaves while a call runs: the turn is stored cancelled with the call, and the conversation goes on", async () => {
    const controller = new AbortController();
    const before = tools.calls.length;
    const response = await postChat(
      app.served.url,
      app.key,
      {
        conversation_id: "loop-left",
        message: "What is the weather in Paris?",
        tools: ["weather"],
        tool_choice: { name: "slow" },
        temperature: 0,
        stream: true,
      },
      controller.signal,
    );
    // Read on (stopping would itself be leaving) until the server has the call; leave while it runs.
    const read = (async () => {
      for await (const _ of readSse(response));
    })().catch(() => undefined);
    await until(() => tools.calls.length > before, "the slow call to reach its server");
    controller.abort();
    await read;
    type Listed = { role: string; content: string; finish_reason?: string };
    const listed = () => get<{ data: Listed[] }>("/api/v1.0/chat/messages?conversation_id=loop-left&sort_by=id:asc");
    await until(async () => (await listed()).data.length === 2, "the cancelled turn's reply to be stored");
    expect((await listed()).data.map(({ role, finish_reason }) => [role, finish_reason])).toEqual([
      ["user", undefined],
      ["assistant", "cancelled"],
    ]);
    const items = await get<{ data: { type: string; name?: string; output?: string | null; error?: unknown }[] }>(
      "/v1/conversations/loop-left/items?order=asc",
    );
    const call = items.data.find((item) => item.type === "mcp_call");
    expect(call).toMatchObject({ name: "slow", output: null });
    expect(call!.error).toBeTruthy();
    // Nothing holds the conversation: its next turn is answered.
    const next = await postChat(app.served.url, app.key, { conversation_id: "loop-left", message: "Hello?", temperature: 0, max_tokens: 8 });
    expect(next.status).toBe(200);
    expect(((await next.json()) as ChatReply).message.finish_reason).toBeDefined();
  });

  test("/metrics counts the calls by server and outcome", async () => {
    const counts = async () => {
      const text = await (await fetch(`${app.served.url}/metrics`)).text();
      return (server: string, outcome: string) =>
        Number(new RegExp(`^parley_mcp_calls_total\\{server="${server}",outcome="${outcome}"\\} (\\d+)$`, "m").exec(text)?.[1]);
    };
    const before = await counts();
    expect(before("local", "ok")).toBe(0);
    const made: string[] = [];
    for (const name of ["lookup", "fail"]) {
      const response = await postChat(app.served.url, app.key, {
        conversation_id: `metrics-${name}`,
        message: "Weather?",
        tools: ["weather"],
        tool_choice: { name },
        temperature: 0,
        max_tokens: 96,
      });
      for (const call of ((await response.json()) as ChatReply).tool_calls ?? [])
        made.push(call.error === null ? "ok" : call.error.type === "tool" ? "tool_error" : "failed");
    }
    expect(made).toEqual(expect.arrayContaining(["ok", "tool_error"]));
    const after = await counts();
    for (const outcome of ["ok", "tool_error", "failed"])
      expect(after("weather", outcome) - before("weather", outcome), outcome).toBe(made.filter((counted) => counted === outcome).length);
  });
});
