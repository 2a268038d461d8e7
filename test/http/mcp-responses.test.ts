/**
 * Tools that run inside the service (issue #68): Responses' `mcp` tools through the openai SDK,
 * against real MCP servers on loopback (a streamable-HTTP one in this process, a stdio one Parley
 * starts), the generated model's calls forced with `tool_choice`: the loop run in the service,
 * streamed, an approval round trip, only listed servers reachable, a server down, a tool's error,
 * a result capped, another user's key refused, and a hostile result kept as data.
 */
import { describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { allowSlowTests, rejection, servedDocument, until } from "../support";
import { MCP_RESULT_CAP as CAP, FLOOD_BYTES, HOSTILE_RESULT, servedWithMcp } from "../support/mcp";

allowSlowTests();

const { app, tools, states } = servedWithMcp("mcp-responses");

const client = () => new OpenAI({ apiKey: app.key, baseURL: `${app.served.url}/v1`, maxRetries: 0 });
const weather = (name: string, more: Record<string, unknown> = {}) =>
  ({
    model: "any",
    input: "What is the weather in Paris?",
    tools: [{ type: "mcp", server_label: "weather", require_approval: "never", ...more }],
    tool_choice: { type: "mcp", server_label: "weather", name },
    temperature: 0,
  }) as OpenAI.Responses.ResponseCreateParamsNonStreaming;

type Item = OpenAI.Responses.ResponseOutputItem;
/** A response that must call the stdio server's tool `name`. */
const local = (name: string) =>
  client().responses.create({
    model: "any",
    input: "Rome",
    tools: [{ type: "mcp", server_label: "local", require_approval: "never" }],
    tool_choice: { type: "mcp", server_label: "local", name },
    temperature: 0,
  });
/** The weather tool's call approved, continuing a response or a conversation. */
const approving = (requestId: string, where: { previous_response_id: string } | { conversation: string }) =>
  client().responses.create({
    model: "any",
    ...where,
    input: [{ type: "mcp_approval_response", approval_request_id: requestId, approve: true }],
    tools: [{ type: "mcp", server_label: "weather", require_approval: "always" }],
    temperature: 0,
  });
const ofType = <T extends Item["type"]>(output: Item[], type: T) => output.filter((item): item is Extract<Item, { type: T }> => item.type === type);

describe("Responses' mcp tools run in the service", () => {
  test("the loop: tools listed, the forced call made on the server, its output fed back, then an answer in words", async () => {
    const before = tools.calls.length;
    const response = await client().responses.create(weather("lookup"));
    expect(response.status).toBe("completed");
    const [listed] = ofType(response.output, "mcp_list_tools");
    expect(listed).toMatchObject({ server_label: "weather", error: null });
    expect(listed!.tools.map((tool) => tool.name).sort()).toEqual(["fail", "flood", "flood_fail", "hostile", "lookup", "slow"]);
    const [call] = ofType(response.output, "mcp_call");
    expect(call).toMatchObject({ server_label: "weather", name: "lookup", error: null });
    const { city } = JSON.parse(call!.arguments) as { city: string };
    expect(call!.output).toBe(`Sunny and 21 degrees in ${city}.`);
    expect(tools.calls.slice(before).map((made) => [made.name, made.city])).toContainEqual(["lookup", city]);
    expect(tools.calls.at(-1)!.headers.get("x-operator")).toBe("parley");
    expect(response.output.at(-1)!.type).toBe("message");
    expect(response.output_text).toMatch(/\w/);
    // Every model turn's tokens: the second's prompt holds the first's.
    const single = await client().responses.create({ model: "any", input: "What is the weather in Paris?", temperature: 0, store: false });
    expect(response.usage!.input_tokens).toBeGreaterThan(2 * single.usage!.input_tokens);
    // Kept with the response as its items.
    const kept = await client().responses.retrieve(response.id);
    expect(kept.output).toEqual(response.output);
  });

  test("streamed: the listing's, the call's and its arguments' events as OpenAI's spec names them; the stream's response is the kept one", async () => {
    const stream = await client().responses.create({ ...weather("lookup"), stream: true });
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const event of stream) events.push(event);
    expect(events.map((event) => event.sequence_number)).toEqual(events.map((_, i) => i));
    const types = events.map((event) => event.type);
    const call = events.find((event) => event.type === "response.output_item.added" && event.item.type === "mcp_call");
    if (call?.type !== "response.output_item.added") throw new Error("an mcp_call item was expected");
    const about = (id: string | undefined) => events.flatMap((event) => ("item_id" in event && event.item_id === id ? [event.type] : []));
    const deltas = about(call.item.id).filter((type) => type === "response.mcp_call_arguments.delta");
    expect(deltas.length).toBeGreaterThan(1);
    expect(about(call.item.id).filter((type) => !type.endsWith(".delta"))).toEqual([
      "response.mcp_call_arguments.done",
      "response.mcp_call.in_progress",
      "response.mcp_call.completed",
    ]);
    expect(types).toContain("response.mcp_list_tools.in_progress");
    expect(types).toContain("response.mcp_list_tools.completed");
    const completed = events.at(-1);
    if (completed?.type !== "response.completed") throw new Error("the stream must end completed");
    const kept = await client().responses.retrieve(completed.response.id);
    expect(completed.response.output).toEqual(kept.output);
    const done = events.flatMap((event) => (event.type === "response.output_item.done" ? [event.item] : []));
    expect(done).toEqual(kept.output);
  });

  test("an approval round trip: the call waits as an mcp_approval_request, and is made once approved on the follow-up", async () => {
    const before = tools.calls.length;
    const asked = await client().responses.create(weather("lookup", { require_approval: "always" }));
    const [request] = ofType(asked.output, "mcp_approval_request");
    expect(request).toMatchObject({ server_label: "weather", name: "lookup" });
    expect(ofType(asked.output, "mcp_call")).toEqual([]);
    expect(tools.calls.length).toBe(before);
    const answered = await approving(request!.id, { previous_response_id: asked.id });
    const [call] = ofType(answered.output, "mcp_call");
    expect(call).toMatchObject({ approval_request_id: request!.id, name: "lookup", arguments: request!.arguments, error: null });
    expect(call!.output).toStartWith("Sunny and 21 degrees in ");
    expect(tools.calls.length).toBe(before + 1);
    // Listed once in the chain; the answer's item is kept with the input.
    expect(ofType(answered.output, "mcp_list_tools")).toEqual([]);
    const input = await client().responses.inputItems.list(answered.id);
    expect(input.data).toContainEqual(expect.objectContaining({ type: "mcp_approval_response", approval_request_id: request!.id, approve: true }));
  });

  test("streamed, an approval request comes whole, as kept; the approved call's events follow on the follow-up's stream", async () => {
    const typesOf = (events: OpenAI.Responses.ResponseStreamEvent[]) => events.map((event) => event.type);
    const asking: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const event of await client().responses.create({ ...weather("lookup", { require_approval: "always" }), stream: true })) asking.push(event);
    expect(typesOf(asking).filter((type) => type.startsWith("response.mcp_call"))).toEqual([]);
    const completed = asking.at(-1);
    if (completed?.type !== "response.completed") throw new Error("the stream must end completed");
    const request = ofType(completed.response.output, "mcp_approval_request")[0]!;
    const about = asking.flatMap((event) => ("item" in event && event.item.id === request.id ? [[event.type, event.item]] : []));
    expect(about).toEqual([
      ["response.output_item.added", request],
      ["response.output_item.done", request],
    ]);
    expect((await client().responses.retrieve(completed.response.id)).output).toEqual(completed.response.output);
    const answering: OpenAI.Responses.ResponseStreamEvent[] = [];
    const follow = await client().responses.create({
      model: "any",
      previous_response_id: completed.response.id,
      input: [{ type: "mcp_approval_response", approval_request_id: request.id, approve: true }],
      tools: [{ type: "mcp", server_label: "weather", require_approval: "always" }],
      temperature: 0,
      stream: true,
    });
    for await (const event of follow) answering.push(event);
    expect(typesOf(answering).slice(2, 6)).toEqual([
      "response.output_item.added",
      "response.mcp_call.in_progress",
      "response.mcp_call.completed",
      "response.output_item.done",
    ]);
    const done = answering.at(-1);
    if (done?.type !== "response.completed") throw new Error("the stream must end completed");
    expect(ofType(done.response.output, "mcp_call")[0]).toMatchObject({ approval_request_id: request.id, status: "completed" });
  });

  test('tool_choice "none" offers no server\'s tool: the model answers in words, as it would with none', async () => {
    const { tools: offered } = weather("lookup", { require_approval: "never" });
    const plain = await client().responses.create({ model: "any", input: "What is the weather in Paris?", temperature: 0, store: false });
    const none = await client().responses.create({ ...weather("lookup"), tools: offered, tool_choice: "none", store: false });
    expect(none.output.map((item) => item.type)).toEqual(["mcp_list_tools", "message"]);
    expect(none.output_text).toBe(plain.output_text);
    expect(none.usage!.input_tokens).toBe(plain.usage!.input_tokens);
  });

  test("a refused approval makes no call: the model is told and answers", async () => {
    const asked = await client().responses.create(weather("lookup", { require_approval: "always" }));
    const [request] = ofType(asked.output, "mcp_approval_request");
    const before = tools.calls.length;
    const refused = await client().responses.create({
      model: "any",
      previous_response_id: asked.id,
      input: [{ type: "mcp_approval_response", approval_request_id: request!.id, approve: false, reason: "not today" }],
      tools: [{ type: "mcp", server_label: "weather", require_approval: "always" }],
      tool_choice: "none",
      temperature: 0,
    });
    expect(tools.calls.length).toBe(before);
    expect(refused.output.map((item) => item.type)).toEqual(["message"]);
    expect(refused.output_text).toMatch(/\w/);
  });

  test("unstored, the approval round trip gives the output back as input", async () => {
    const asked = await client().responses.create({ ...weather("lookup", { require_approval: "always" }), store: false });
    const [request] = ofType(asked.output, "mcp_approval_request");
    const answered = await client().responses.create({
      model: "any",
      store: false,
      input: [
        { role: "user", content: "What is the weather in Paris?" },
        ...(asked.output as OpenAI.Responses.ResponseInputItem[]),
        { type: "mcp_approval_response", approval_request_id: request!.id, approve: true },
      ],
      tools: [{ type: "mcp", server_label: "weather", require_approval: { never: { tool_names: ["fail"] } } }],
      temperature: 0,
    });
    expect(ofType(answered.output, "mcp_call")[0]).toMatchObject({ approval_request_id: request!.id, error: null });
  });

  test("allowed_tools offers only those; a request's headers reach the server beside the operator's", async () => {
    const response = await client().responses.create(
      weather("lookup", { allowed_tools: ["lookup", "fail"], headers: { "x-team": "north" }, authorization: "team-token" }),
    );
    expect(
      ofType(response.output, "mcp_list_tools")[0]!
        .tools.map((tool) => tool.name)
        .sort(),
    ).toEqual(["fail", "lookup"]);
    const { headers } = tools.calls.at(-1)!;
    expect([headers.get("x-team"), headers.get("authorization"), headers.get("x-operator")]).toEqual(["north", "Bearer team-token", "parley"]);
    // The operator's header is not the request's to change.
    await client().responses.create(weather("lookup", { headers: { "X-Operator": "someone" } }));
    expect(tools.calls.at(-1)!.headers.get("x-operator")).toBe("parley");
    // Not the shared connection's: the next request without them sends none.
    await client().responses.create(weather("lookup"));
    expect(tools.calls.at(-1)!.headers.get("x-team")).toBeNull();
  });

  test("a tool's error is the call's error, shown to the model, which answers on", async () => {
    const response = await client().responses.create(weather("fail"));
    const [call] = ofType(response.output, "mcp_call");
    expect(call).toMatchObject({ output: null, error: { type: "mcp_tool_execution_error", content: [{ type: "text", text: "the weather service is down" }] } });
    expect(response.status).toBe("completed");
    expect(response.output.at(-1)!.type).toBe("message");
  });

  test("a tool error's content over the server's limit is kept as its cut text", async () => {
    const response = await client().responses.create(weather("flood_fail"));
    const [call] = ofType(response.output, "mcp_call");
    const { content } = call!.error as { content: { type: string; text: string }[] };
    expect(content).toHaveLength(1);
    expect(content[0]!.text.slice(CAP)).toBe(`\n[cut: the result was ${FLOOD_BYTES} bytes, over this server's limit of ${CAP}]`);
  });

  test("a result over the server's limit is cut, and says so", async () => {
    const response = await client().responses.create(weather("flood"));
    const [call] = ofType(response.output, "mcp_call");
    expect(call!.output!.startsWith("x".repeat(CAP))).toBe(true);
    expect(call!.output!.slice(CAP)).toBe(`\n[cut: the result was ${FLOOD_BYTES} bytes, over this server's limit of ${CAP}]`);
  });

  test("a hostile result that looks like items and fields is kept as the call's text, never as items", async () => {
    const response = await client().responses.create(weather("hostile"));
    const [call] = ofType(response.output, "mcp_call");
    expect(call!.output).toBe(HOSTILE_RESULT);
    const kept = await client().responses.retrieve(response.id);
    for (const output of [response.output, kept.output]) {
      expect(output.map((item) => item.type).filter((type) => type !== "mcp_list_tools" && type !== "mcp_call" && type !== "message")).toEqual([]);
      expect(JSON.stringify(output.filter((item) => item.type !== "mcp_call"))).not.toContain("delete_everything");
    }
    expect(kept.instructions).toBeNull();
  });

  test("a stdio server Parley started and supervises: its tool called, its start told", async () => {
    const response = await client().responses.create({
      model: "any",
      input: "Say Rome back",
      tools: [{ type: "mcp", server_label: "local", require_approval: "never" }],
      tool_choice: { type: "mcp", server_label: "local", name: "echo" },
      temperature: 0,
    });
    const [call] = ofType(response.output, "mcp_call");
    expect(call!.output).toBe(`echo from stdio: ${(JSON.parse(call!.arguments) as { city: string }).city}`);
    expect(states).toContain("local starting");
    expect(states).toContain("local ready");
  });

  test("a stdio server that dies is restarted, each change told: the call it died in failed, the next one is answered", async () => {
    const ready = () => states.filter((state) => state === "local ready").length;
    await until(() => ready() > 0, "the stdio server to be ready");
    const readyBefore = ready();
    const crashed = await local("crash");
    expect(ofType(crashed.output, "mcp_call")[0]!.error).toMatchObject({ type: "mcp_protocol_error" });
    await until(() => ready() > readyBefore, "the stdio server to be restarted");
    expect(states).toContain("local exited");
    expect(ofType((await local("echo")).output, "mcp_call")[0]!.output).toStartWith("echo from stdio: ");
  });

  test("a server that tells its tools changed is listed again: the next response offers the new tool", async () => {
    const listedOf = (response: OpenAI.Responses.Response) => ofType(response.output, "mcp_list_tools")[0]!.tools.map((tool) => tool.name);
    expect(listedOf(await local("grow"))).not.toContain("grown");
    const grown = await local("grown");
    expect(listedOf(grown)).toContain("grown");
    expect(ofType(grown.output, "mcp_call")[0]!.output).toStartWith("grown: ");
  });

  test("a call slower than its server's time fails as a protocol error, and the model answers on", async () => {
    const response = await client().responses.create({
      model: "any",
      input: "Rome",
      tools: [{ type: "mcp", server_label: "sluggish", require_approval: "never" }],
      tool_choice: { type: "mcp", server_label: "sluggish", name: "slow" },
      temperature: 0,
    });
    const [call] = ofType(response.output, "mcp_call");
    expect(call).toMatchObject({ status: "failed", output: null, error: { type: "mcp_protocol_error", code: -32001 } });
    expect(response.status).toBe("completed");
  });

  test("in the background: the loop runs detached, its events kept and replayed as streamed", async () => {
    const started = await client().responses.create({ ...weather("lookup"), background: true });
    await until(async () => (await client().responses.retrieve(started.id)).status !== "in_progress", "the background response to end", 20_000, 50);
    const kept = await client().responses.retrieve(started.id);
    expect(kept.status).toBe("completed");
    expect(ofType(kept.output, "mcp_call")[0]!.output).toStartWith("Sunny");
    const replay = await client().responses.retrieve(started.id, { stream: true });
    const done: Item[] = [];
    for await (const event of replay) if (event.type === "response.output_item.done") done.push(event.item);
    expect(done).toEqual(kept.output);
  });

  test("quotas count every model turn: the user's usage grows by the response's whole usage", async () => {
    const usage = async () => {
      const response = await fetch(`${app.served.url}/api/v1.0/usage`, { headers: { authorization: `Bearer ${app.otherKey}` } });
      const { days } = (await response.json()) as { days: { total_tokens: number }[] };
      return days.reduce((sum, day) => sum + day.total_tokens, 0);
    };
    const before = await usage();
    const other = new OpenAI({ apiKey: app.otherKey, baseURL: `${app.served.url}/v1`, maxRetries: 0 });
    const response = await other.responses.create(weather("lookup"));
    expect(ofType(response.output, "mcp_call")).toHaveLength(1);
    expect((await usage()) - before).toBe(response.usage!.total_tokens);
  });
});

describe("only the servers the operator lists, for the keys it names", () => {
  const refusal = async (body: Record<string, unknown>, key = app.key) => {
    const error = await rejection(
      new OpenAI({ apiKey: key, baseURL: `${app.served.url}/v1`, maxRetries: 0 }).responses.create({ model: "any", input: "Hi", ...body }),
    );
    if (!(error instanceof OpenAI.APIError)) throw error;
    return { status: error.status, param: (error.error as { param?: string }).param, message: error.message };
  };

  test("an unlisted label, and a URL other than the listed server's, are 400 naming the field", async () => {
    expect(
      await refusal({
        tools: [
          { type: "function", name: "f" },
          { type: "mcp", server_label: "elsewhere" },
        ],
      }),
    ).toMatchObject({
      status: 400,
      param: "tools[1].server_label",
    });
    expect(await refusal({ tools: [{ type: "mcp", server_label: "weather", server_url: "http://169.254.169.254/mcp" }] })).toMatchObject({
      status: 400,
      param: "tools[0].server_url",
    });
    expect(await refusal({ tools: [{ type: "mcp", server_label: "local", server_url: tools.url }] })).toMatchObject({
      status: 400,
      param: "tools[0].server_url",
    });
    expect(await refusal({ tools: [{ type: "mcp", server_label: "local", headers: { "x-team": "north" } }] })).toMatchObject({
      status: 400,
      param: "tools[0].headers",
    });
    expect(await refusal({ tools: [{ type: "mcp", server_label: "weather", connector_id: "connector_gmail" }] })).toMatchObject({ status: 400 });
    const { tools: offered, tool_choice } = weather("forecast");
    expect(await refusal({ tools: offered, tool_choice })).toMatchObject({
      status: 400,
      param: "tool_choice",
      message: expect.stringContaining('MCP server "weather" offers no tool "forecast"'),
    });
  });

  test("a server listed for one user is, to another user's key, as unlisted", async () => {
    const body = {
      tools: [{ type: "mcp", server_label: "alices", require_approval: "never" }],
      tool_choice: { type: "mcp", server_label: "alices", name: "lookup" },
    };
    expect(await refusal(body, app.otherKey)).toMatchObject({ status: 400, param: "tools[0].server_label" });
    const response = await client().responses.create({
      model: "any",
      input: "Hi",
      temperature: 0,
      ...body,
    } as OpenAI.Responses.ResponseCreateParamsNonStreaming);
    expect(ofType(response.output, "mcp_call")[0]!.output).toStartWith("Sunny");
  });

  test("within a conversation: the mcp items kept as its own, an approval answered in it, a follow-up that sees the calls", async () => {
    const conversation = await client().conversations.create();
    const first = await client().responses.create({ ...weather("lookup"), conversation: conversation.id });
    expect(first.status).toBe("completed");
    const [call] = ofType(first.output, "mcp_call");
    expect(call!.output).toStartWith("Sunny and 21 degrees in ");
    const kept = async () => (await client().conversations.items.list(conversation.id, { order: "asc", limit: 100 })).data;
    expect((await kept()).map((item) => item.id)).toEqual([expect.any(String), ...first.output.map((item) => item.id)]);
    // Listed once in the conversation; the call waits for approval, which a later response in it gives.
    const asked = await client().responses.create({ ...weather("lookup", { require_approval: "always" }), conversation: conversation.id });
    expect(ofType(asked.output, "mcp_list_tools")).toEqual([]);
    const [request] = ofType(asked.output, "mcp_approval_request");
    expect(request).toMatchObject({ server_label: "weather", name: "lookup" });
    const answered = await approving(request!.id, { conversation: conversation.id });
    const [approved] = ofType(answered.output, "mcp_call");
    expect(approved).toMatchObject({ approval_request_id: request!.id, arguments: request!.arguments, error: null });
    const types = (await kept()).map((item) => item.type);
    expect(types.filter((type) => type.startsWith("mcp_"))).toEqual([
      "mcp_list_tools",
      "mcp_call",
      "mcp_approval_request",
      "mcp_approval_response",
      "mcp_call",
    ]);
    // A follow-up without tools in the conversation is answered from its history, calls and all.
    const after = await client().responses.create({ model: "any", conversation: conversation.id, input: "Thanks!", temperature: 0, max_output_tokens: 16 });
    expect(after.output.at(-1)!.type).toBe("message");
    expect((await kept()).at(-1)!.id).toBe(after.output.at(-1)!.id);
  });

  test("a listed server that is down: 424, naming it, before anything is kept", async () => {
    const failed = await refusal({ tools: [{ type: "mcp", server_label: "down" }] });
    expect(failed.status).toBe(424);
    expect(failed.message).toContain('MCP server "down" did not list its tools');
  });
});

test("the bodies match the served OpenAPI document: a response with every mcp item, its input items, a 424", async () => {
  const document = await servedDocument(app.served.url);
  const raw = async (method: string, path: string, body?: unknown) => {
    const response = await fetch(`${app.served.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${app.key}`, "content-type": "application/json" },
      ...(body ? { body: JSON.stringify(body) } : {}),
    });
    return { status: response.status, body: (await response.json()) as { id: string; output: { type: string; id: string }[] } };
  };
  const asked = await raw("POST", "/v1/responses", weather("lookup", { require_approval: { never: { tool_names: ["fail"] } } }));
  document.expectDocumented("/v1/responses", "post", 200, asked.body);
  const request = asked.body.output.find((item) => item.type === "mcp_approval_request")!;
  const answered = await raw("POST", "/v1/responses", {
    ...weather("fail", { require_approval: { never: { tool_names: ["fail"] } } }),
    previous_response_id: asked.body.id,
    input: [{ type: "mcp_approval_response", approval_request_id: request.id, approve: true }],
  });
  expect(answered.body.output.map((item) => item.type)).toEqual(["mcp_call", "mcp_call", "message"]);
  document.expectDocumented("/v1/responses/{id}", "get", 200, (await raw("GET", `/v1/responses/${answered.body.id}`)).body);
  document.expectDocumented("/v1/responses/{id}/input_items", "get", 200, (await raw("GET", `/v1/responses/${answered.body.id}/input_items`)).body);
  const down = await raw("POST", "/v1/responses", { model: "any", input: "Hi", tools: [{ type: "mcp", server_label: "down" }] });
  expect(down.status).toBe(424);
  document.expectDocumented("/v1/responses", "post", 424, down.body);
});
