/**
 * One user's prompt cache never serves another: a user sending exactly what another sent gets no
 * more cached tokens than a wrong guess of the same length (only the opening every prompt shares:
 * the template's, and the operator's system prompt on the native API), on both APIs, and a
 * client's tools are a client's text like any other; the same user's follow-ups still reuse their
 * prefix.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ChatService } from "../../src/chat/service";
import { oneEngine, TurnRunner } from "../../src/chat/turn-runner";
import type { Engine } from "../../src/llm/engine";
import { allowSlowTests, bearer, postChat, type Served, serveApp, testDb, testEngine } from "../support";

allowSlowTests();

const db = testDb("cache-isolation");
const alice = await db.keys.create("alice", "user");
const bob = await db.keys.create("bob", "user");
let engine: Engine;
let served: Served;

beforeAll(async () => {
  engine = await testEngine({ parallel: 4 });
  const runner = new TurnRunner(oneEngine(() => engine));
  const chat = new ChatService(db.storage.conversations, runner, { systemPrompt: "You are the operator's assistant. Answer briefly and kindly." });
  served = serveApp({ storage: db.storage, engine, runner, chat });
});
afterAll(async () => {
  await served.stop();
  await engine.close();
  await db.storage.close();
});

/** A private text of many tokens, and a guess of the same shape that differs from its first word. */
const SECRET = "my account pin is four four seven one and my doctor is called anna lindqvist at the north clinic ".repeat(4).trim();
const GUESS = SECRET.replace(/^my/, "an");

async function openai(key: string, messages: { role: string; content: string }[]): Promise<number> {
  const response = await fetch(`${served.url}/v1/chat/completions`, {
    method: "POST",
    headers: { ...bearer(key), "content-type": "application/json" },
    body: JSON.stringify({ model: "parley", messages, temperature: 0, max_tokens: 4 }),
  });
  expect(response.status).toBe(200);
  const body = (await response.json()) as {
    usage: { prompt_tokens: number; prompt_tokens_details: { cached_tokens: number } };
    choices: { message: { content: string } }[];
  };
  return body.usage.prompt_tokens_details.cached_tokens;
}

async function native(key: string, conversation: string, message: string): Promise<number> {
  const response = await postChat(served.url, key, { message, conversation_id: conversation, temperature: 0, max_tokens: 4 });
  expect(response.status).toBe(200);
  return ((await response.json()) as { usage: { cached_tokens: number } }).usage.cached_tokens;
}

describe("the prompt cache is per user", () => {
  test("OpenAI API: another user's exact copy reuses no more than a wrong guess; the sender's follow-up reuses its prefix", async () => {
    const history = [{ role: "user", content: SECRET }];
    await openai(alice.key, history);
    const copy = await openai(bob.key, history);
    const guess = await openai(bob.key, [{ role: "user", content: GUESS }]);
    // Bob's guess ran on some sequence too; a fresh key of his would be no different.
    expect(copy).toBe(guess);
    expect(copy).toBeLessThan(8);
    const followUp = await openai(alice.key, [...history, { role: "assistant", content: "Noted." }, { role: "user", content: "Thanks" }]);
    expect(followUp).toBeGreaterThan(60);
  });

  test("Responses without previous_response_id: the user's best-matching sequence, as for chat completions; never another user's", async () => {
    const respond = async (key: string, input: { role: string; content: string }[]) => {
      const response = await fetch(`${served.url}/v1/responses`, {
        method: "POST",
        headers: { ...bearer(key), "content-type": "application/json" },
        body: JSON.stringify({ model: "parley", input, temperature: 0, max_output_tokens: 4, store: false }),
      });
      expect(response.status).toBe(200);
      return ((await response.json()) as { usage: { input_tokens_details: { cached_tokens: number } } }).usage.input_tokens_details.cached_tokens;
    };
    const history = [{ role: "user", content: `${SECRET} and my locker is twelve` }];
    await respond(alice.key, history);
    // Others' requests in between: a new chain no longer lands on its sequence by being the next one free.
    for (const filler of ["one", "two"]) await openai(bob.key, [{ role: "user", content: filler }]);
    // A stateless agent's next step repeats the whole history: it finds it cached, as on chat completions.
    expect(await respond(alice.key, [...history, { role: "assistant", content: "Noted." }, { role: "user", content: "Thanks" }])).toBeGreaterThan(60);
    const copy = await respond(bob.key, history);
    const guess = await respond(bob.key, [{ role: "user", content: GUESS }]);
    expect(copy).toBe(guess);
    expect(copy).toBeLessThan(8);
  });

  test("native API: another user's conversation starting with the same message reuses only the operator's opening", async () => {
    await native(alice.key, "private", SECRET);
    const copy = await native(bob.key, "mine", SECRET);
    const guess = await native(bob.key, "other", GUESS);
    expect(copy).toBe(guess);
    // At most the opening (the template's and the system prompt) is shared, nothing past it.
    expect(copy).toBeLessThan(40);
    expect(await native(alice.key, "private", "and one more thing")).toBeGreaterThan(60);
  });

  test("OpenAI API with tools: another user sending the same tools reuses no more than one sending others", async () => {
    // One sequence: every request lands where the one before left its tokens.
    const single = await testEngine({ parallel: 1 });
    const server = serveApp({ storage: db.storage, engine: single });
    try {
      const tools = (description: string) => [
        { type: "function", function: { name: "lookup_patient", description, parameters: { type: "object", properties: { id: { type: "string" } } } } },
      ];
      const ask = async (key: string, description: string) => {
        const response = await fetch(`${server.url}/v1/chat/completions`, {
          method: "POST",
          headers: { ...bearer(key), "content-type": "application/json" },
          body: JSON.stringify({ model: "parley", messages: [{ role: "user", content: "Hello" }], tools: tools(description), temperature: 0, max_tokens: 2 }),
        });
        expect(response.status).toBe(200);
        return ((await response.json()) as { usage: { prompt_tokens_details: { cached_tokens: number } } }).usage.prompt_tokens_details.cached_tokens;
      };
      await ask(alice.key, SECRET);
      const copy = await ask(bob.key, SECRET);
      await ask(alice.key, SECRET);
      const guess = await ask(bob.key, GUESS);
      expect(copy).toBe(guess);
      expect(copy).toBeLessThan(8);
      // The sender's own next request reuses its tools.
      await ask(alice.key, SECRET);
      expect(await ask(alice.key, SECRET)).toBeGreaterThan(60);
    } finally {
      await server.stop();
      await single.close();
    }
  });
});
