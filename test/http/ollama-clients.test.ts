/**
 * Ollama's API as the clients built on it drive it, each unchanged: LangChain's `@langchain/ollama`
 * (chat, structured output, tools, embeddings), LlamaIndex's `@llamaindex/ollama` (an index built
 * and queried with Parley as both embedder and LLM), and Open WebUI's requests as its
 * backend/open_webui/routers/ollama.py sends them, asserted on what it reads from each answer.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ChatOllama, OllamaEmbeddings } from "@langchain/ollama";
import { Ollama as LlamaIndexOllama, OllamaEmbedding } from "@llamaindex/ollama";
import { Document, MetadataMode, Settings, VectorStoreIndex } from "llamaindex";
import { z } from "zod";
import { DEMO_MODEL_NAME } from "../../src/gguf/presets";
import { allowSlowTests, presetModel, type ServedModelsApp, serveModels, testDb } from "../support";

allowSlowTests();

const EMBED = "parley-embed";

const db = testDb("ollama-clients");
let service: ServedModelsApp;
let key: string;
let headers: Record<string, string>;

beforeAll(async () => {
  key = (await db.keys.create("alice", "user")).key;
  headers = { Authorization: `Bearer ${key}` };
  service = await serveModels({ storage: db.storage, paths: [await presetModel("demo"), await presetModel("embed")], max: 2, keepAliveMs: 60_000 });
});
afterAll(async () => {
  await service.stop();
  await db.storage.close();
});

const cosine = (a: readonly number[], b: readonly number[]) => {
  const dot = a.reduce((sum, value, index) => sum + value * b[index]!, 0);
  return dot / Math.hypot(...a) / Math.hypot(...b);
};

describe("LangChain's @langchain/ollama", () => {
  const chat = (fields: { temperature: number; seed?: number; numPredict: number }) =>
    new ChatOllama({ model: DEMO_MODEL_NAME, baseUrl: service.served.url, headers, ...fields });

  test("ChatOllama: a reply, whole and streamed alike, with its usage", async () => {
    const reply = await chat({ temperature: 0, numPredict: 30 }).invoke("Hello there!");
    expect(typeof reply.content).toBe("string");
    expect((reply.content as string).length).toBeGreaterThan(0);
    expect(reply.usage_metadata?.input_tokens).toBeGreaterThan(0);
    expect(reply.usage_metadata?.output_tokens).toBeGreaterThan(0);
    let streamed = "";
    for await (const chunk of await chat({ temperature: 0, numPredict: 30 }).stream("Hello there!")) streamed += chunk.content as string;
    expect(streamed).toBe(reply.content as string);
  });

  test("withStructuredOutput(zod schema): the schema goes as `format`, and the reply parses to it", async () => {
    const Person = z.object({ name: z.string().max(20), age: z.number().int() });
    const person = await chat({ temperature: 1, seed: 3, numPredict: 120 }).withStructuredOutput(Person).invoke("Describe a person as JSON");
    expect(Person.parse(person)).toEqual(person);
  });

  test("bindTools: the model's call comes as tool_calls, its arguments parsed and held to the schema", async () => {
    const Weather = z.object({ city: z.string().max(24) });
    const tool = { name: "get_weather", description: "The weather in a city", schema: Weather };
    let call: { name: string; args: Record<string, unknown> } | undefined;
    // Ollama has no tool_choice: whether the demo calls is the sampler's, so seeds are tried in turn.
    for (let seed = 1; seed <= 100 && !call; seed++) {
      const message = await chat({ temperature: 1, seed, numPredict: 80 }).bindTools([tool]).invoke("What is the weather in Paris?");
      call = message.tool_calls?.[0];
    }
    expect(call?.name).toBe("get_weather");
    expect(Weather.parse(call!.args)).toEqual(call!.args as { city: string });
  });

  test("OllamaEmbeddings: a query's vector is its document's, of the model's width", async () => {
    const embeddings = new OllamaEmbeddings({ model: EMBED, baseUrl: service.served.url, headers });
    const texts = ["The cat sat on the mat.", "Stock markets fell sharply today."];
    const documents = await embeddings.embedDocuments(texts);
    expect(documents).toHaveLength(2);
    expect(documents[0]!.length).toBeGreaterThan(0);
    expect(documents[1]).toHaveLength(documents[0]!.length);
    expect(cosine(await embeddings.embedQuery(texts[0]!), documents[0]!)).toBeGreaterThan(0.9999);
    expect(cosine(documents[0]!, documents[1]!)).toBeLessThan(0.9999);
  });
});

test("LlamaIndex: a VectorStoreIndex embedded by Parley, queried with Parley as the LLM", async () => {
  const config = { host: service.served.url, headers };
  Settings.embedModel = new OllamaEmbedding({ model: EMBED, config });
  Settings.llm = new LlamaIndexOllama({ model: DEMO_MODEL_NAME, config, options: { num_predict: 40, seed: 1 } });
  const texts = ["Parley serves chat from a local model.", "The Eiffel Tower is in Paris.", "Cats sleep most of the day."];
  const index = await VectorStoreIndex.fromDocuments(texts.map((text) => new Document({ text })));
  const retrieved = await index.asRetriever({ similarityTopK: 1 }).retrieve({ query: texts[1]! });
  expect(retrieved.map((hit) => hit.node.getContent(MetadataMode.NONE))).toEqual([texts[1]!]);
  const answer = await index.asQueryEngine({ similarityTopK: 2 }).query({ query: "Where is the Eiffel Tower?" });
  expect(typeof answer.message.content).toBe("string");
  expect((answer.message.content as string).length).toBeGreaterThan(0);
  expect(answer.sourceNodes).toHaveLength(2);
});

describe("Open WebUI's requests, as its Ollama router sends them", () => {
  // Open WebUI tags an untagged name `:latest` and looks that up among /api/tags' `model`s before it
  // sends a chat, generate or embed with that name: these replays send the names so tagged.
  const DEMO = `${DEMO_MODEL_NAME}:latest`;
  const get = async (path: string) => (await fetch(`${service.served.url}${path}`, { headers: { "Content-Type": "application/json", ...headers } })).json();
  const post = (path: string, body: object) =>
    fetch(`${service.served.url}${path}`, { method: "POST", headers: { "Content-Type": "application/json", ...headers }, body: JSON.stringify(body) });

  test("/api/version: a version its lowest-of-all comparison reads as integers", async () => {
    const { version } = (await get("/api/version")) as { version: string };
    // Open WebUI: tuple(map(int, re.sub(r"^v|-.*", "", version).split(".")))
    const parts = version.replace(/^v|-.*/g, "").split(".");
    for (const part of parts) expect(part).toMatch(/^\d+$/);
  });

  test("/api/tags and /api/ps: each model's `model` and `name`; ps's `expires_at` an ISO 8601 time", async () => {
    const { models } = (await get("/api/tags")) as { models: { model: string; name: string }[] };
    expect(models.map((model) => model.model).sort()).toEqual([DEMO, `${EMBED}:latest`]);
    for (const model of models) expect(model.name).toBe(model.model);
    const load = await post("/api/generate", { model: DEMO, prompt: "", stream: false });
    expect(load.status).toBe(200);
    expect(((await load.json()) as { model: string }).model).toBe(DEMO);
    const loaded = (await get("/api/ps")) as { models: { name: string; expires_at: string }[] };
    const demo = loaded.models.find((model) => model.name === DEMO);
    // Open WebUI: int(datetime.fromisoformat(expires_at).timestamp())
    expect(demo?.expires_at).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/);
    expect(Date.parse(demo!.expires_at)).toBeGreaterThan(Date.now());
  });

  test("/api/show: the JSON it passes through, with the details and capabilities its model page reads", async () => {
    const response = await post("/api/show", { model: DEMO });
    expect(response.status).toBe(200);
    const shown = (await response.json()) as { details: { format: string }; capabilities: string[]; model_info: object };
    expect(shown.details.format).toBe("gguf");
    expect(shown.capabilities).toContain("completion");
    expect(Object.keys(shown.model_info).length).toBeGreaterThan(0);
  });

  test("/api/chat streamed with the options its chat sends: lines of message.content, a last line with the counts it turns into usage", async () => {
    const response = await post("/api/chat", {
      model: DEMO,
      messages: [
        { role: "system", content: "You are a helpful assistant." },
        { role: "user", content: "Hello there!" },
      ],
      stream: true,
      keep_alive: "5m",
      options: { temperature: 0.8, top_p: 0.9, top_k: 40, num_predict: 30, num_ctx: 2048, seed: 7, repeat_penalty: 1.1, stop: ["<|im_end|>"] },
    });
    expect(response.status).toBe(200);
    const lines = (await response.text())
      .split("\n")
      .filter(Boolean)
      .map((line) => JSON.parse(line) as { message: { content: string }; done: boolean; [count: string]: unknown });
    expect(lines.map((line) => line.message.content).join("").length).toBeGreaterThan(0);
    for (const line of lines) expect(line.model).toBe(DEMO);
    const last = lines.at(-1)!;
    expect(last.done).toBe(true);
    for (const count of ["total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration", "eval_count", "eval_duration"])
      expect(Number.isInteger(last[count]) && (last[count] as number) >= 0).toBe(true);
    // Open WebUI's token rate divides by the durations when above zero, and says N/A otherwise.
    expect(last.eval_count).toBeGreaterThan(0);
    expect(last.eval_duration).toBeGreaterThan(0);
  });

  test("/api/embed: the input list's vectors under `embeddings`", async () => {
    const response = await post("/api/embed", { model: `${EMBED}:latest`, input: ["one", "two"] });
    const { model, embeddings } = (await response.json()) as { model: string; embeddings: number[][] };
    expect(model).toBe(`${EMBED}:latest`);
    expect(embeddings).toHaveLength(2);
    expect(embeddings[0]!.length).toBeGreaterThan(0);
  });
});
