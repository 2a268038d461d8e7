/**
 * Background responses through the official `openai` SDK, on a model that never ends a reply by
 * itself: created and polled, streamed and resumed after the client left (`starting_after`),
 * cancelled; refusals; another user's not found.
 */
import { beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { allowSlowTests, rejection, servedEngine, until } from "../support";

allowSlowTests();

const app = servedEngine("responses-background", { preset: "bench-small", parallel: 2, contextSize: 512 });
let client: OpenAI;
let other: OpenAI;

beforeAll(() => {
  client = new OpenAI({ apiKey: app.key, baseURL: `${app.served.url}/v1`, maxRetries: 0 });
  other = new OpenAI({ apiKey: app.otherKey, baseURL: `${app.served.url}/v1`, maxRetries: 0 });
});

type Event = OpenAI.Responses.ResponseStreamEvent;
const deltas = (events: Event[]) => events.flatMap((event) => (event.type === "response.output_text.delta" ? [event.delta] : [])).join("");
/** Events of a stream until `enough` says so; leaving it then is a disconnect. */
async function readUntil(stream: AsyncIterable<Event>, enough: (events: Event[]) => boolean): Promise<Event[]> {
  const events: Event[] = [];
  for await (const event of stream) {
    events.push(event);
    if (enough(events)) break;
  }
  return events;
}

describe("background responses", () => {
  test("created at once, in progress, then polled until it has ended, as kept", async () => {
    const started = await client.responses.create({ model: "any", input: "Hello", background: true, max_output_tokens: 12, temperature: 0 });
    expect(started).toMatchObject({ status: "in_progress", background: true, output: [] });
    let polled = started;
    await until(async () => (polled = await client.responses.retrieve(started.id)).status !== "in_progress", "the response to end");
    expect(polled).toMatchObject({ status: "incomplete", incomplete_details: { reason: "max_output_tokens" }, background: true });
    expect(polled.output_text.length).toBeGreaterThan(0);
  });

  test("a stream left after three deltas is resumed after its last event, from the kept events: the deltas make the final text", async () => {
    const first = await readUntil(
      await client.responses.create({ model: "any", input: "Hello", background: true, stream: true, max_output_tokens: 40, temperature: 0 }),
      (events) => events.filter((event) => event.type === "response.output_text.delta").length === 3,
    );
    const created = first[0] as OpenAI.Responses.ResponseCreatedEvent;
    expect(created.response.background).toBe(true);
    // The generation goes on without its client.
    const last = first.at(-1)!.sequence_number;
    const rest = await readUntil(await client.responses.retrieve(created.response.id, { stream: true, starting_after: last }), () => false);
    expect(rest[0]!.sequence_number).toBe(last + 1);
    const ended = rest.at(-1) as OpenAI.Responses.ResponseIncompleteEvent;
    expect(ended.type).toBe("response.incomplete");
    expect(deltas([...first, ...rest])).toBe(ended.response.output_text ?? (await client.responses.retrieve(created.response.id)).output_text);
    // Replayed from the start, the stream is the same events as written.
    const again = await readUntil(await client.responses.retrieve(created.response.id, { stream: true }), () => false);
    expect(again).toEqual([...first, ...rest]);
  });

  test("cancelled while it generates: cancelled, with what was said, and its stream ends", async () => {
    const started = await client.responses.create({ model: "any", input: "Go on", background: true, max_output_tokens: 400, temperature: 0 });
    const live = await client.responses.retrieve(started.id, { stream: true });
    const seen = readUntil(live, () => false);
    // A second follower, left at the first delta: the response is generating.
    await readUntil(await client.responses.retrieve(started.id, { stream: true }), (events) =>
      events.some((event) => event.type === "response.output_text.delta"),
    );
    const cancelled = await client.responses.cancel(started.id);
    expect(cancelled.status).toBe("cancelled");
    const events = await seen;
    expect(events.at(-1)!.type).toBe("response.incomplete");
    const message = cancelled.output.find((item) => item.type === "message");
    expect(deltas(events)).toBe(message?.type === "message" ? message.content.map((part) => (part.type === "output_text" ? part.text : "")).join("") : "");
    expect((await client.responses.retrieve(started.id)).status).toBe("cancelled");
  });

  test("refused: background without store, a foreground response's stream, cancelling a foreground response; another user's is not found", async () => {
    const unkept = await rejection(client.responses.create({ model: "any", input: "Hi", background: true, store: false }));
    expect((unkept as InstanceType<typeof OpenAI.BadRequestError>).param).toBe("background");
    const foreground = await client.responses.create({ model: "any", input: "Hi", max_output_tokens: 2 });
    expect((await rejection(client.responses.retrieve(foreground.id, { stream: true }))) as object).toBeInstanceOf(OpenAI.BadRequestError);
    expect((await rejection(client.responses.cancel(foreground.id))) as object).toBeInstanceOf(OpenAI.BadRequestError);
    const theirs = await client.responses.create({ model: "any", input: "Hi", background: true, max_output_tokens: 2 });
    for (const attempt of [other.responses.retrieve(theirs.id, { stream: true }), other.responses.cancel(theirs.id)])
      expect(await rejection(attempt)).toBeInstanceOf(OpenAI.NotFoundError);
  });
});
