/**
 * A request body's fields are what its JSON says, on every protocol: a key named `__proto__`, at
 * the top or nested, is refused as an unknown field (it once became the body's prototype, whose
 * keys then read as fields); an Ollama option named after an object's own methods is ignored as
 * any unknown one (Ollama's server ignores them), never read as a known one; and JSON types are strict, so a number in a string is no number, while a
 * query string's numbers are still read from their text. Each refusal has its control: the same
 * body spelled right is answered.
 */
import { expect, test } from "bun:test";
import { allowSlowTests, servedEngine } from "../support";

allowSlowTests();

const app = servedEngine("strict-fields");

interface Answer {
  status: number;
  /** The field the refusal names: OpenAI's and the native API's `param`, else what Anthropic's and Ollama's messages lead with. */
  field: string | null;
}

async function send(path: string, body: string): Promise<Answer> {
  const response = await fetch(`${app.served.url}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${app.key}`, "content-type": "application/json" },
    body,
  });
  const answer = (await response.json()) as { error?: string | { param?: string | null; message: string } };
  const error = answer.error;
  if (error == null) return { status: response.status, field: null };
  const message = typeof error === "string" ? error : error.message;
  const field = typeof error === "object" && error.param !== undefined ? error.param : (/^([^:\s]+): /.exec(message)?.[1] ?? null);
  return { status: response.status, field };
}

const HELLO = `[{"role": "user", "content": "Hello"}]`;

/** One turn a protocol answers briefly, its body's text with `$` where a test puts more fields. */
const TURNS = {
  openai: { path: "/v1/chat/completions", body: `{"model": "any", "max_tokens": 2, "messages": ${HELLO} $}`, refused: 400 },
  anthropic: { path: "/v1/messages", body: `{"model": "any", "max_tokens": 2, "messages": ${HELLO} $}`, refused: 400 },
  ollama: { path: "/api/chat", body: `{"model": "any", "stream": false, "options": {"num_predict": 2}, "messages": ${HELLO} $}`, refused: 400 },
  native: { path: "/api/v1.0/chat", body: `{"conversation_id": "strict-$id", "message": "Hello", "max_tokens": 2 $}`, refused: 422 },
} as const;

type Protocol = keyof typeof TURNS;

let turns = 0;
const turn = (protocol: Protocol, extra = "", edit: (body: string) => string = (body) => body) => {
  const { path, body } = TURNS[protocol];
  return send(path, edit(body.replace("$id", String(turns++)).replace(" $", extra)));
};

test.each(Object.keys(TURNS) as Protocol[])("%s: a __proto__ key is refused as an unknown field, at the top and nested", async (protocol) => {
  const { refused } = TURNS[protocol];
  expect(await turn(protocol)).toEqual({ status: 200, field: null });
  expect(await turn(protocol, `, "__proto__": {"max_tokens": 3}`)).toEqual({ status: refused, field: "__proto__" });
  // Escaped in the text, it is the same key once parsed.
  expect(await turn(protocol, `, "\\u005f_proto__": {}`)).toEqual({ status: refused, field: "__proto__" });
  const nested = protocol === "native" ? `, "response_format": {"type": "text", "__proto__": {}}` : "";
  const inMessage = (body: string) => body.replace(`"content": "Hello"`, `"content": "Hello", "__proto__": {"role": "system"}`);
  expect(await turn(protocol, nested, protocol === "native" ? undefined : inMessage)).toEqual({
    status: refused,
    field: protocol === "native" ? "response_format.__proto__" : "messages[0].__proto__",
  });
});

test("Ollama: an option named __proto__ is refused by its name; one named after an object's methods is unknown, so ignored", async () => {
  expect(await turn("ollama", "", (body) => body.replace(`"num_predict": 2`, `"num_predict": 2, "__proto__": {}`))).toEqual({
    status: 400,
    field: "options.__proto__",
  });
  // As Ollama's server, an option it does not know is ignored (ollama-lenient.test.ts: and said), never taken for a known one.
  for (const name of ["constructor", "toString", "hasOwnProperty", "valueOf", "num_thread"]) {
    expect(await turn("ollama", "", (body) => body.replace(`"num_predict": 2`, `"num_predict": 2, "${name}": {}`))).toEqual(
      name === "num_thread" ? { status: 400, field: "options.num_thread" } : { status: 200, field: null },
    );
  }
  expect(await turn("ollama", "", (body) => body.replace(`"num_predict": 2`, `"num_predict": 2, "num_thread": 2`))).toEqual({ status: 200, field: null });
});

test("a number in a string is no number, on every protocol", async () => {
  expect(await turn("openai", "", (body) => body.replace(`"max_tokens": 2`, `"max_tokens": "2"`))).toEqual({ status: 400, field: "max_tokens" });
  expect(await turn("openai", `, "seed": "7"`)).toEqual({ status: 400, field: "seed" });
  expect(await turn("openai", `, "top_k": "5"`)).toEqual({ status: 400, field: "top_k" });
  expect(await turn("anthropic", "", (body) => body.replace(`"max_tokens": 2`, `"max_tokens": "2"`))).toEqual({ status: 400, field: "max_tokens" });
  // Ollama's own server decodes options into typed fields: a string for an integer is an error there too.
  expect(await turn("ollama", "", (body) => body.replace(`"num_predict": 2`, `"num_predict": "2"`))).toEqual({ status: 400, field: "options.num_predict" });
  expect(await turn("native", `, "temperature": "0.5"`)).toEqual({ status: 422, field: "temperature" });
  expect(await turn("native", "", (body) => body.replace(`"max_tokens": 2`, `"max_tokens": "2"`))).toEqual({ status: 422, field: "max_tokens" });
  expect(await send("/v1/responses", `{"model": "any", "input": "Hello", "store": false, "max_output_tokens": "16"}`)).toEqual({
    status: 400,
    field: "max_output_tokens",
  });
  expect(await send("/v1/completions", `{"model": "any", "prompt": "Hello", "max_tokens": "2"}`)).toEqual({ status: 400, field: "max_tokens" });
  // Retrieval's too, checked before the model is looked for (this server has none: the controls are refused naming it).
  for (const [path, field, body] of [
    ["/v1/embeddings", "dimensions", `{"input": "x", "dimensions": $}`],
    ["/api/embed", "dimensions", `{"model": "any", "input": "x", "dimensions": $}`],
    ["/v1/rerank", "top_n", `{"query": "x", "documents": ["y"], "top_n": $}`],
  ] as const) {
    expect(await send(path, body.replace("$", `"1"`))).toEqual({ status: 400, field });
    expect(await send(path, body.replace("$", "1"))).toEqual({ status: 400, field: "model" });
  }
  // The same fields as numbers are answered.
  expect(await turn("native", `, "temperature": 0.5, "seed": 7`)).toEqual({ status: 200, field: null });
  expect(await send("/v1/responses", `{"model": "any", "input": "Hello", "store": false, "max_output_tokens": 16}`)).toEqual({ status: 200, field: null });
});

test("a query string's numbers are still read from their text", async () => {
  const listed = await fetch(`${app.served.url}/v1/models?limit=1`, { headers: { "x-api-key": app.key, "anthropic-version": "2023-06-01" } });
  expect(listed.status).toBe(200);
  expect(((await listed.json()) as { data: unknown[] }).data).toHaveLength(1);
});
