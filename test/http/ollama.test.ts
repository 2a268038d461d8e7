/**
 * Ollama's API through its own client, the `ollama` npm package: chat and generate, streamed (one
 * JSON object a line) and not, tools, `format`, `think`, the model listing, and refusals in
 * Ollama's error shape. Request seeds are fixed, so each reply is the same on every run.
 */
import { beforeAll, describe, expect, test } from "bun:test";
import { Ollama } from "ollama";
import { allowSlowTests, rejection, servedDocument, servedEngine } from "../support";
import { VISION_IMAGES } from "../support/vision";

allowSlowTests();

const app = servedEngine("ollama", { parallel: 2 });
let client: Ollama;
beforeAll(() => {
  client = new Ollama({ host: app.served.url, headers: { Authorization: `Bearer ${app.key}` } });
});

const ask = [{ role: "user", content: "Hello there!" }];
/** A real picture, which a model without a projector cannot see. */
const WHITE_PNG = Buffer.from(VISION_IMAGES.white!()).toString("base64");

/** The client's error for a refused request: its status and Ollama's one message. */
async function refusal(promise: Promise<unknown>): Promise<{ status: number; error: string }> {
  const error = (await rejection(promise)) as { status_code: number; error: string };
  return { status: error.status_code, error: error.error };
}

describe("chat", () => {
  test("one object, and the same reply streamed as lines that add up to it, with Ollama's counts", async () => {
    const options = { temperature: 0, seed: 1, num_predict: 40 };
    const whole = await client.chat({ model: "any", messages: ask, stream: false, options });
    expect(whole.message.role).toBe("assistant");
    expect(whole.message.content.length).toBeGreaterThan(0);
    expect(whole).toMatchObject({ done: true, done_reason: "stop", model: `${app.engine.modelName}:latest` });
    expect(whole.prompt_eval_count).toBeGreaterThan(0);
    expect(whole.eval_count).toBeGreaterThan(0);
    expect(whole.total_duration).toBeGreaterThan(0);

    let text = "";
    let last: Awaited<ReturnType<typeof client.chat>> | undefined;
    for await (const part of await client.chat({ model: "any", messages: ask, stream: true, options })) {
      text += part.message.content;
      last = part;
    }
    expect(text).toBe(whole.message.content);
    expect(last).toMatchObject({ done: true, done_reason: "stop", eval_count: whole.eval_count, prompt_eval_count: whole.prompt_eval_count });
  });

  test("no messages, or no prompt, loads the model (done_reason load); with keep_alive 0 it is let go (unload)", async () => {
    const loaded = await client.chat({ model: "any", messages: [], stream: false });
    expect(loaded).toMatchObject({ model: `${app.engine.modelName}:latest`, done: true, done_reason: "load", message: { role: "assistant", content: "" } });
    expect(await client.generate({ model: "any", prompt: "", stream: false })).toMatchObject({ done: true, done_reason: "load", response: "" });
    expect(await client.generate({ model: "any", prompt: "", keep_alive: 0, stream: false })).toMatchObject({ done_reason: "unload" });
    expect((await refusal(client.generate({ model: "any", prompt: "", system: "Be brief.", stream: false }))).status).toBe(400);
  });

  test("keep_alive and the server's resource options change no reply", async () => {
    const options = { temperature: 0, seed: 1, num_predict: 20 };
    const plain = await client.chat({ model: "any", messages: ask, stream: false, options });
    const asked = await client.chat({
      model: "any",
      messages: ask,
      stream: false,
      keep_alive: "10m",
      options: { ...options, num_thread: 8, num_gpu: 99, use_mmap: true },
    });
    expect(asked.message.content).toBe(plain.message.content);
  });

  test("num_predict cuts the reply: done_reason length", async () => {
    const cut = await client.chat({ model: "any", messages: ask, stream: false, options: { temperature: 1, seed: 3, num_predict: 2 } });
    expect(cut).toMatchObject({ done_reason: "length", eval_count: 2 });
  });

  test('format "json" and a schema hold the reply', async () => {
    const json = await client.chat({ model: "any", messages: ask, stream: false, format: "json", options: { temperature: 0, num_predict: 200 } });
    expect(typeof JSON.parse(json.message.content)).toBe("object");
    const schema = { type: "object", properties: { mood: { type: "string", maxLength: 40 } }, required: ["mood"], additionalProperties: false };
    const held = await client.chat({ model: "any", messages: ask, stream: false, format: schema, options: { temperature: 1, seed: 2, num_predict: 200 } });
    expect(Object.keys(JSON.parse(held.message.content))).toEqual(["mood"]);
  });

  test("tools: the model's call comes whole, its arguments an object; a tool's message answers it by name", async () => {
    const tools = [
      {
        type: "function",
        function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string", maxLength: 24 } }, required: ["city"] } },
      },
    ];
    let call: { function: { name: string; arguments: Record<string, unknown> } } | undefined;
    for (let seed = 1; seed <= 100 && !call; seed++) {
      const reply = await client.chat({ model: "any", messages: ask, tools, stream: false, options: { temperature: 1, seed, num_predict: 80 } });
      call = reply.message.tool_calls?.[0];
    }
    expect(call?.function.name).toBe("get_weather");
    expect(typeof call?.function.arguments.city).toBe("string");
    const answered = await client.chat({
      model: "any",
      messages: [...ask, { role: "assistant", content: "", tool_calls: [call!] }, { role: "tool", content: "sunny", tool_name: "get_weather" }],
      tools,
      stream: false,
      options: { temperature: 0, num_predict: 20 },
    });
    expect(answered.done).toBe(true);
    const unanswered = await refusal(
      client.chat({ model: "any", messages: [...ask, { role: "tool", content: "sunny", tool_name: "get_weather" }], stream: false }),
    );
    expect(unanswered.status).toBe(400);
    expect(unanswered.error).toStartWith("messages[1].tool_name: ");
  });
});

test("generate: the prompt through the chat template, streamed and not", async () => {
  const options = { temperature: 0, seed: 1, num_predict: 40 };
  const whole = await client.generate({ model: "any", prompt: "Hello there!", stream: false, options });
  expect(whole.response?.length).toBeGreaterThan(0);
  expect(whole.done_reason).toBe("stop");
  let text = "";
  for await (const part of await client.generate({ model: "any", prompt: "Hello there!", stream: true, options })) text += part.response ?? "";
  expect(text).toBe(whole.response ?? "");
});

test("the model listing: tags, ps, show, version", async () => {
  const { models } = await client.list();
  // Ollama's names carry a tag, `latest` where the file has none; either spelling names the model.
  expect(models.map((model) => model.name)).toEqual([`${app.engine.modelName}:latest`]);
  expect((await client.ps()).models.map((model) => model.name)).toEqual([`${app.engine.modelName}:latest`]);
  expect((await client.show({ model: `${app.engine.modelName}:latest` })).details.format).toBe("gguf");
  expect((await client.show({ model: app.engine.modelName })).details.format).toBe("gguf");
  expect(await refusal(client.show({ model: "nope" }))).toMatchObject({ status: 404 });
  // The ollama package has no verbose; other clients send it.
  const verbose = await fetch(`${app.served.url}/api/show`, {
    method: "POST",
    headers: { authorization: `Bearer ${app.key}` },
    body: JSON.stringify({ model: app.engine.modelName, verbose: true }),
  });
  expect(verbose.status).toBe(400);
  expect(((await verbose.json()) as { error: string }).error).toStartWith("verbose: ");
  expect((await client.version()).version).toMatch(/^\d+\.\d+\.\d+$/);
});

test("a body is JSON whatever its media type, as curl sends Ollama's documented examples", async () => {
  const types: Record<string, string>[] = [{}, { "content-type": "application/x-www-form-urlencoded" }];
  for (const headers of types) {
    const response = await fetch(`${app.served.url}/api/generate`, {
      method: "POST",
      headers: { authorization: `Bearer ${app.key}`, ...headers },
      body: JSON.stringify({ model: "any", prompt: "Hi", stream: false, options: { num_predict: 3 } }),
    });
    expect(response.status).toBe(200);
    expect(((await response.json()) as { done: boolean }).done).toBe(true);
  }
});

test("replies, stream lines, listings and errors match the served OpenAPI document", async () => {
  const spec = await servedDocument(app.served.url);
  const expectDocumented = (path: string, method: string, status: number, mediaType: string, body: unknown) =>
    spec.expectDocumented(path, method, status, body, mediaType);
  const send = (path: string, body: object) =>
    fetch(`${app.served.url}${path}`, { method: "POST", headers: { authorization: `Bearer ${app.key}` }, body: JSON.stringify(body) });
  const chat = { model: "any", messages: ask, options: { temperature: 0, num_predict: 12 } };
  expectDocumented("/api/chat", "post", 200, "application/json", await (await send("/api/chat", { ...chat, stream: false })).json());
  const lines = (await (await send("/api/chat", chat)).text()).trimEnd().split("\n");
  for (const line of lines) expectDocumented("/api/chat", "post", 200, "application/x-ndjson", JSON.parse(line));
  expectDocumented(
    "/api/generate",
    "post",
    200,
    "application/json",
    await (await send("/api/generate", { model: "any", prompt: "Hi", stream: false, options: { num_predict: 4 } })).json(),
  );
  const get = async (path: string) => (await fetch(`${app.served.url}${path}`, { headers: { authorization: `Bearer ${app.key}` } })).json();
  for (const path of ["/api/tags", "/api/ps", "/api/version"]) expectDocumented(path, "get", 200, "application/json", await get(path));
  expectDocumented("/api/show", "post", 200, "application/json", await (await send("/api/show", { model: app.engine.modelName })).json());
  const refused = await send("/api/chat", { ...chat, options: { num_ctx: "1" } });
  expect(refused.status).toBe(400);
  expectDocumented("/api/chat", "post", 400, "application/json", await refused.json());
});

describe("refused in Ollama's shape", () => {
  test.each([
    ["no key", () => new Ollama({ host: app.served.url }).chat({ model: "any", messages: ask, stream: false }), 401, ""],
    [
      "an option of the wrong type",
      () => client.chat({ model: "any", messages: ask, stream: false, options: { num_ctx: "8192" as unknown as number } }),
      400,
      "options.num_ctx",
    ],
    [
      "an image that is no picture",
      () => client.chat({ model: "any", messages: [{ role: "user", content: "What is this?", images: ["aGk="] }], stream: false }),
      400,
      "messages[0].images[0]",
    ],
    [
      "a picture, to a model without a projector",
      () => client.chat({ model: "any", messages: [{ role: "user", content: "What is this?", images: [WHITE_PNG] }], stream: false }),
      400,
      "messages",
    ],
    ["a raw prompt with a system message", () => client.generate({ model: "any", prompt: "Hi", raw: true, system: "Be brief.", stream: false }), 400, "system"],
    ["a suffix, to a model without FIM tokens", () => client.generate({ model: "any", prompt: "def f():", suffix: "\n", stream: false }), 400, "suffix"],
    ["pulling a model", () => client.pull({ model: "llama3.2", stream: false }), 403, ""],
  ] as const)("%s", async (_, send, status, param) => {
    const refused = await refusal(send());
    expect(refused.status).toBe(status);
    expect(refused.error).toStartWith(param === "" ? "" : `${param}: `);
  });
});

describe("think, on a reasoning model", () => {
  const thinking = servedEngine("ollama-think", { preset: "qwen3-thinking", parallel: 1 });

  test("its thought apart as message.thinking, streamed before the answer; think: false thinks not at all", async () => {
    const thinker = new Ollama({ host: thinking.served.url, headers: { Authorization: `Bearer ${thinking.key}` } });
    const options = { temperature: 0, seed: 1, num_predict: 120 };
    const whole = await thinker.chat({ model: "any", messages: ask, stream: false, options });
    expect(whole.message.thinking?.length).toBeGreaterThan(0);
    expect(whole.message.content).not.toContain("<think>");
    let thought = "";
    let answerBegan = false;
    for await (const part of await thinker.chat({ model: "any", messages: ask, stream: true, options })) {
      if (part.message.content !== "") answerBegan = true;
      if (part.message.thinking) {
        expect(answerBegan).toBe(false);
        thought += part.message.thinking;
      }
    }
    expect(thought).toBe(whole.message.thinking!);
    const plain = await thinker.chat({ model: "any", messages: ask, stream: false, think: false, options });
    expect(plain.message.thinking).toBeUndefined();
    expect(plain.message.content.length).toBeGreaterThan(0);
  });
});
