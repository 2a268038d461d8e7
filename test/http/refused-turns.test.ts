/**
 * A refused turn stores nothing, on every protocol that stores turns, and nothing stored can make
 * a conversation unanswerable. A picture the model cannot be shown (a model with no projector, or
 * bytes its projector cannot decode) is refused before the first write, and before a stream's
 * first byte, so SDKs see a typed 4xx; a conversation that already holds such a picture (stored by
 * an earlier release, or through the items API) is answered with the picture left out, and says so.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { itemRows } from "../../src/chat/conversation-items";
import { PICTURE_LIMITS } from "../../src/chat/pictures";
import type { Engine } from "../../src/llm/engine";
import { allowSlowTests, bearer, compiledNatives, postChat, rejection, type Served, serveApp, testDb, testEngine } from "../support";
import { png } from "../support/png";
import { VISION_IMAGES, visionPair } from "../support/vision";

allowSlowTests();

const natives = await compiledNatives();
const picture = Buffer.from(VISION_IMAGES.white!()).toString("base64");

/**
 * A PNG whose chunks are all in place but whose image data is no deflate stream: its header is a
 * picture's, and only decoding it finds it is none.
 */
function undecodable(): string {
  const file = Buffer.from(png(8, 8, () => [1, 2, 3]));
  const idat = file.indexOf("IDAT");
  file.fill(0xff, idat + 4, idat + 4 + file.readUInt32BE(idat - 4));
  return file.toString("base64");
}

const db = testDb("refused-turns");
const alice = await db.keys.create("alice", "user");
let textEngine: Engine;
let text: Served;

beforeAll(async () => {
  textEngine = await testEngine();
  text = serveApp({ storage: db.storage, engine: textEngine });
});
afterAll(async () => {
  await text.stop();
  await textEngine.close();
  await db.storage.close();
});

const conversations = async (url: string) =>
  ((await (await fetch(`${url}/api/v1.0/chat/conversations`, { headers: bearer(alice.key) })).json()) as { data: { id: string }[] }).data.map(({ id }) => id);
const storedMessages = () => (db.storage.sqlite.query("SELECT count(*) AS n FROM messages").get() as { n: number }).n;

/** A conversation stored with a user message holding `base64` as its pictures, as a release before this one could leave it. */
async function storedWithPicture(conversationId: string, ...base64: string[]): Promise<void> {
  const conversation = await db.storage.conversations.findOrCreate(alice.userId, conversationId);
  await db.storage.conversations.addMessages(
    conversation,
    itemRows([{ type: "message", id: `msg_${conversationId}`, role: "user", text: "look", images: base64.map((picture) => ({ at: 4, base64: picture })) }]),
  );
}

describe("a picture to a model with no projector", () => {
  test("the native API refuses it before storing anything; the conversation then answers text", async () => {
    const before = storedMessages();
    const refused = await postChat(text.url, alice.key, { conversation_id: "no-eyes", message: "look", images: [picture] });
    expect(refused.status).toBe(422);
    expect(((await refused.json()) as { error: { param: string } }).error.param).toBe("images");
    const streamed = await postChat(text.url, alice.key, { conversation_id: "no-eyes", message: "look", images: [picture], stream: true });
    expect(streamed.status).toBe(422);
    expect(streamed.headers.get("content-type")).toContain("application/json");
    expect(storedMessages()).toBe(before);
    expect(await conversations(text.url)).not.toContain("no-eyes");
    const answered = await postChat(text.url, alice.key, { conversation_id: "no-eyes", message: "hello", max_tokens: 4 });
    expect(answered.status).toBe(200);
  });

  test("OpenAI and Anthropic streams are refused with a 400 before the stream opens", async () => {
    const client = new OpenAI({ apiKey: alice.key, baseURL: `${text.url}/v1`, maxRetries: 0 });
    const openai = await rejection(
      client.chat.completions.create({
        model: "any",
        stream: true,
        max_tokens: 4,
        messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: `data:image/png;base64,${picture}` } }] }],
      }),
    );
    expect(openai).toBeInstanceOf(OpenAI.BadRequestError);
    expect(openai).toMatchObject({ param: "messages[0].content[0].image_url.url" });
    const anthropic = await fetch(`${text.url}/v1/messages`, {
      method: "POST",
      headers: { ...bearer(alice.key), "content-type": "application/json" },
      body: JSON.stringify({
        model: "any",
        max_tokens: 4,
        stream: true,
        messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: picture } }] }],
      }),
    });
    expect(anthropic.status).toBe(400);
    const refusal = (await anthropic.json()) as { type: string; error: { message: string } };
    expect(refusal.type).toBe("error");
    expect(refusal.error.message).toStartWith("messages[0].content[0].source");
  });

  test("Responses in a conversation refuse it and store no item; a conversation holding one answers with it left out", async () => {
    const client = new OpenAI({ apiKey: alice.key, baseURL: `${text.url}/v1`, maxRetries: 0 });
    const conversation = await client.conversations.create();
    const image = { type: "input_image" as const, detail: "auto" as const, image_url: `data:image/png;base64,${picture}` };
    const refused = await rejection(
      client.responses.create({ model: "any", max_output_tokens: 4, conversation: conversation.id, input: [{ role: "user", content: [image] }] }),
    );
    expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
    expect((await client.conversations.items.list(conversation.id)).data).toEqual([]);
    // The items API keeps what a later model may see; this one answers without it.
    await client.conversations.items.create(conversation.id, { items: [{ type: "message", role: "user", content: [image] }] });
    const { data, response } = await client.responses
      .create({ model: "any", max_output_tokens: 4, conversation: conversation.id, input: "and now?" })
      .withResponse();
    expect(data.output_text).not.toBe("");
    expect(response.headers.get("x-parley-pictures-left-out")).toBe("1");
  });

  test("a native conversation stored with a picture answers its next text turn, the picture left out and counted", async () => {
    await storedWithPicture("kept-picture", picture);
    const answered = await postChat(text.url, alice.key, { conversation_id: "kept-picture", message: "and?", max_tokens: 4 });
    expect(answered.status).toBe(200);
    expect(answered.headers.get("x-parley-pictures-left-out")).toBe("1");
  });
});

describe.skipIf(natives === undefined)("a picture its projector cannot decode", () => {
  let visionEngine: Engine;
  let vision: Served;
  beforeAll(async () => {
    const { model, projector } = await visionPair();
    visionEngine = await testEngine({ modelPath: model, projectorPath: projector, contextSize: 1024 });
    vision = serveApp({ storage: db.storage, engine: visionEngine });
  });
  afterAll(async () => {
    await vision.stop();
    await visionEngine.close();
  });

  test("is refused on the native API before anything is stored, streamed or not", async () => {
    const before = storedMessages();
    for (const stream of [false, true]) {
      const refused = await postChat(vision.url, alice.key, { conversation_id: "garbled", message: "look", images: [undecodable()], stream });
      expect(refused.status).toBe(422);
    }
    expect(storedMessages()).toBe(before);
    expect(await conversations(vision.url)).not.toContain("garbled");
  });

  test(`of a conversation's stored pictures, the newest ${PICTURE_LIMITS.perRequest} are shown, the older left out and counted`, async () => {
    await storedWithPicture("many-kept", ...Array.from({ length: PICTURE_LIMITS.perRequest + 2 }, () => picture));
    const next = await postChat(vision.url, alice.key, { conversation_id: "many-kept", message: "and?", max_tokens: 4 });
    expect(next.status).toBe(200);
    expect(next.headers.get("x-parley-pictures-left-out")).toBe("2");
  });

  test("stored in a conversation, it is left out and the conversation goes on, its good pictures still seen", async () => {
    await storedWithPicture("garbled-kept", undecodable());
    const next = await postChat(vision.url, alice.key, { conversation_id: "garbled-kept", message: "and?", images: [picture], max_tokens: 4 });
    expect(next.status).toBe(200);
    expect(next.headers.get("x-parley-pictures-left-out")).toBe("1");
    const after = await postChat(vision.url, alice.key, { conversation_id: "garbled-kept", message: "more?", max_tokens: 4 });
    expect(after.status).toBe(200);
    expect(after.headers.get("x-parley-pictures-left-out")).toBe("1");
  });
});
