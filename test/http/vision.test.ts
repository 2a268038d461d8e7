/**
 * Pictures through each protocol that carries them, with real clients, on the vision preset and its
 * projector: at temperature 0 each reply equals llama-server's on the same picture and question
 * (test/fixtures/llama-server-vision.json), so each framing put the picture where llama-server does.
 */
import { describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import { Ollama } from "ollama";
import OpenAI from "openai";
import { allowSlowTests, bearer, compiledNatives, postChat, readSse, rejection, serveApp, servedEngine, testDb, testEngine } from "../support";
import { VISION_FIXTURE_PATH, VISION_IMAGES, VISION_PROMPT, VISION_REPLY_TOKENS, type VisionFixture, visionPair } from "../support/vision";

allowSlowTests();

const fixture = (await Bun.file(VISION_FIXTURE_PATH).json()) as VisionFixture;
const natives = await compiledNatives();
const { model, projector } = await visionPair();
const base64 = (name: string) => Buffer.from(VISION_IMAGES[name]!()).toString("base64");

/** A greedy chat completion asking about the picture at `url`, after the question's text, as the fixture asked llama-server. */
const askAbout = (client: OpenAI, url: string) =>
  client.chat.completions.create({
    model: "any",
    temperature: 0,
    max_tokens: VISION_REPLY_TOKENS,
    messages: [
      {
        role: "user",
        content: [
          { type: "text", text: VISION_PROMPT },
          { type: "image_url", image_url: { url } },
        ],
      },
    ],
  });

describe.skipIf(natives === undefined)("pictures on every protocol", () => {
  const served = servedEngine("vision", { modelPath: model, projectorPath: projector, parallel: 2, contextSize: 1024 });
  const openai = () => new OpenAI({ apiKey: served.key, baseURL: `${served.served.url}/v1`, maxRetries: 0 });

  test("OpenAI chat completions: an image_url part after the text, as a data URL; the listing says the model sees pictures", async () => {
    const client = openai();
    const [listed] = (await client.models.list()).data as unknown as { vision: boolean }[];
    expect(listed!.vision).toBe(true);
    for (const name of Object.keys(VISION_IMAGES)) {
      const completion = await askAbout(client, `data:image/png;base64,${base64(name)}`);
      expect({ name, content: completion.choices[0]!.message.content }).toEqual({ name, content: fixture.replies[name]!.content });
    }
  });

  test("Anthropic messages: an image block (base64 source) after the text", async () => {
    const client = new Anthropic({ apiKey: served.key, baseURL: served.served.url, maxRetries: 0 });
    for (const name of Object.keys(VISION_IMAGES)) {
      const message = await client.messages.create({
        model: "any",
        // Greedy: the SDK's types no longer name temperature, which Parley (and Anthropic's API) still take.
        ...({ temperature: 0 } as object),
        max_tokens: VISION_REPLY_TOKENS,
        messages: [
          {
            role: "user",
            content: [
              { type: "text", text: VISION_PROMPT },
              { type: "image", source: { type: "base64", media_type: "image/png", data: base64(name) } },
            ],
          },
        ],
      });
      const text = message.content.map((block) => (block.type === "text" ? block.text : "")).join("");
      expect({ name, text }).toEqual({ name, text: fixture.replies[name]!.content });
    }
    const remote = await rejection(
      client.messages.create({
        model: "any",
        max_tokens: 2,
        messages: [{ role: "user", content: [{ type: "image", source: { type: "url", url: "https://example.com/cat.png" } }] }],
      }),
    );
    expect(remote).toMatchObject({ status: 400 });
    expect((remote as Error).message).toContain("messages[0].content[0].source.url");
  });

  test("Ollama chat and generate: a message's images after its text", async () => {
    const client = new Ollama({ host: served.served.url, headers: { Authorization: `Bearer ${served.key}` } });
    const options = { temperature: 0, num_predict: VISION_REPLY_TOKENS };
    for (const name of Object.keys(VISION_IMAGES)) {
      const chat = await client.chat({ model: "any", stream: false, options, messages: [{ role: "user", content: VISION_PROMPT, images: [base64(name)] }] });
      const generate = await client.generate({ model: "any", stream: false, options, prompt: VISION_PROMPT, images: [base64(name)] });
      expect({ name, chat: chat.message.content, generate: generate.response }).toEqual({
        name,
        chat: fixture.replies[name]!.content,
        generate: fixture.replies[name]!.content,
      });
    }
  });

  test("OpenAI Responses: an input_image part after the text; a conversation keeps it, lists it back, and is its user's alone", async () => {
    const client = openai();
    const image = { type: "input_image" as const, detail: "auto" as const, image_url: `data:image/png;base64,${base64("stripes")}` };
    const response = await client.responses.create({
      model: "any",
      temperature: 0,
      max_output_tokens: VISION_REPLY_TOKENS,
      input: [{ role: "user", content: [{ type: "input_text", text: VISION_PROMPT }, image] }],
    });
    expect(response.output_text).toBe(fixture.replies.stripes!.content);
    const conversation = await client.conversations.create();
    const inConversation = await client.responses.create({
      model: "any",
      temperature: 0,
      max_output_tokens: VISION_REPLY_TOKENS,
      conversation: conversation.id,
      input: [{ role: "user", content: [{ type: "input_text", text: VISION_PROMPT }, image] }],
    });
    expect(inConversation.output_text).toBe(fixture.replies.stripes!.content);
    const items = await client.conversations.items.list(conversation.id, { order: "asc" });
    expect((items.data[0] as { content: unknown }).content).toEqual([
      { type: "input_text", text: VISION_PROMPT },
      { ...image, file_id: null },
    ]);
    const bob = new OpenAI({ apiKey: served.otherKey, baseURL: `${served.served.url}/v1`, maxRetries: 0 });
    expect(await rejection(bob.conversations.items.list(conversation.id))).toBeInstanceOf(OpenAI.NotFoundError);
    await client.conversations.delete(conversation.id);
    expect(await rejection(client.conversations.items.list(conversation.id))).toBeInstanceOf(OpenAI.NotFoundError);
  });

  test("a picture at a URL of a host the operator lists is fetched; a host not listed, or a redirect, is refused", async () => {
    const pictures = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      fetch: (request) =>
        new URL(request.url).pathname === "/white.png"
          ? new Response(VISION_IMAGES.white!(), { headers: { "content-type": "image/png" } })
          : Response.redirect("http://127.0.0.1:9/elsewhere.png", 302),
    });
    const db = testDb("vision-hosts");
    const { key } = await db.keys.create("carol", "user");
    const listing = serveApp({ storage: db.storage, engine: served.engine, limits: { pictureHosts: ["127.0.0.1"] } });
    try {
      const client = new OpenAI({ apiKey: key, baseURL: `${listing.url}/v1`, maxRetries: 0 });
      const ask = (url: string) => askAbout(client, url);
      const fetched = await ask(`http://127.0.0.1:${pictures.port}/white.png`);
      expect(fetched.choices[0]!.message.content).toBe(fixture.replies.white!.content);
      const unlisted = await rejection(ask(`http://localhost:${pictures.port}/white.png`));
      expect(unlisted).toMatchObject({ status: 400, param: "messages[0].content[1].image_url.url" });
      expect((unlisted as Error).message).toContain("PARLEY_PICTURE_HOSTS");
      const redirected = await rejection(ask(`http://127.0.0.1:${pictures.port}/moved.png`));
      expect(redirected).toMatchObject({ status: 400, param: "messages[0].content[1].image_url.url" });
      expect((redirected as Error).message).toContain("could not be fetched");
    } finally {
      await listing.stop();
      await pictures.stop(true);
      await db.storage.close();
    }
  });

  test("OpenAI chat completions: a remote URL, what is no picture, and a picture outside a user message are 400 naming the part", async () => {
    const client = openai();
    const ask = (content: OpenAI.ChatCompletionContentPart[], role: "user" | "system" = "user") =>
      client.chat.completions.create({ model: "any", max_tokens: 2, messages: [{ role, content } as OpenAI.ChatCompletionMessageParam] });
    const remote = await rejection(ask([{ type: "image_url", image_url: { url: "https://example.com/cat.png" } }]));
    expect(remote).toMatchObject({ status: 400, param: "messages[0].content[0].image_url.url" });
    expect((remote as Error).message).toContain("PARLEY_PICTURE_HOSTS");
    const noPicture = await rejection(
      ask([{ type: "image_url", image_url: { url: `data:image/png;base64,${Buffer.from("no picture").toString("base64")}` } }]),
    );
    expect(noPicture).toMatchObject({ status: 400, param: "messages[0].content[0].image_url.url" });
    const fromSystem = await rejection(ask([{ type: "image_url", image_url: { url: `data:image/png;base64,${base64("white")}` } }] as never, "system"));
    expect(fromSystem).toMatchObject({ status: 400 });
  });
});

/** The native reply's JSON, as far as these tests read it. */
interface NativeReply {
  message: { content: string };
  user_message: { image_count?: number; images?: string[] };
  usage: { prompt_tokens: number; cached_tokens: number };
}

describe.skipIf(natives === undefined)("the native API keeps a conversation's pictures", () => {
  test("a message with a picture gets llama-server's reply; after a restart the next turn still sees it, as a client sending it all again does; listed to its user alone, deleted with its conversation; a reply counts its pictures, never echoes them", async () => {
    const db = testDb("vision-native");
    const { key } = await db.keys.create("alice", "user");
    const { key: bob } = await db.keys.create("bob", "user");
    const load = () => testEngine({ modelPath: model, projectorPath: projector, parallel: 2, contextSize: 1024 });
    const ask = async (url: string, body: Record<string, unknown>) => {
      const response = await postChat(url, key, { temperature: 0, max_tokens: VISION_REPLY_TOKENS, ...body });
      expect(response.status).toBe(200);
      return (await response.json()) as NativeReply;
    };
    let engine = await load();
    let served = serveApp({ storage: db.storage, engine });
    try {
      const first = await ask(served.url, { conversation_id: "v1", message: VISION_PROMPT, images: [base64("gradient")] });
      expect(first.message.content).toBe(fixture.replies.gradient!.content);
      // The reply counts the picture the client just sent rather than sending it back (a stream's start and done too, below).
      expect([first.user_message.image_count, first.user_message.images]).toEqual([1, undefined]);
      // Listed with its picture, to its user alone.
      const listed = async (apiKey: string) =>
        ((await (await fetch(`${served.url}/api/v1.0/chat/messages`, { headers: bearer(apiKey) })).json()) as { data: { images?: string[] }[] }).data;
      expect((await listed(key)).map(({ images }) => images)).toEqual([undefined, [`data:image/png;base64,${base64("gradient")}`]]);
      expect(await listed(bob)).toEqual([]);
      await served.stop();
      await engine.close();
      engine = await load();
      served = serveApp({ storage: db.storage, engine });
      const next = await ask(served.url, { conversation_id: "v1", message: "And the colours?" });
      // Nothing of it is cached after the restart (a state with pictures is never saved): all evaluated afresh.
      expect(next.usage.cached_tokens).toBeLessThan(first.usage.prompt_tokens);
      const again = await openAiReply(served.url, key, [
        {
          role: "user",
          content: [
            { type: "text", text: VISION_PROMPT },
            { type: "image_url", image_url: { url: `data:image/png;base64,${base64("gradient")}` } },
          ],
        },
        { role: "assistant", content: first.message.content },
        { role: "user", content: "And the colours?" },
      ]);
      expect(next.message.content).toBe(again.content);
      expect(next.usage.prompt_tokens).toBe(again.promptTokens);
      // Deleted with its conversation: no row keeps the picture.
      const deleted = await fetch(`${served.url}/api/v1.0/chat/conversations/v1`, { method: "DELETE", headers: bearer(key) });
      expect(deleted.status).toBe(204);
      expect(db.storage.sqlite.query("SELECT count(*) AS n FROM messages WHERE images IS NOT NULL").get()).toEqual({ n: 0 });
      const streamed = await postChat(served.url, key, {
        conversation_id: "v2",
        message: VISION_PROMPT,
        images: [base64("white")],
        max_tokens: 1,
        stream: true,
      });
      const echoes: NativeReply["user_message"][] = [];
      for await (const { event, data } of readSse(streamed)) if (event === "start" || event === "done") echoes.push((data as NativeReply).user_message);
      expect(echoes.map((echo) => [echo.image_count, echo.images])).toEqual([
        [1, undefined],
        [1, undefined],
      ]);
    } finally {
      await served.stop();
      await engine.close();
      await db.storage.close();
    }
  });
});

/** OpenAI chat's greedy reply to these messages, and its prompt's tokens. */
async function openAiReply(url: string, apiKey: string, messages: OpenAI.ChatCompletionMessageParam[]) {
  const client = new OpenAI({ apiKey, baseURL: `${url}/v1`, maxRetries: 0 });
  const completion = await client.chat.completions.create({ model: "any", temperature: 0, max_tokens: VISION_REPLY_TOKENS, messages });
  return { content: completion.choices[0]!.message.content ?? "", promptTokens: completion.usage!.prompt_tokens };
}
