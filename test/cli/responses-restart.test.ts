/**
 * Kept responses across a restart of `parley serve` on the same database: a chain continued after
 * SIGTERM and start gives the reply it gives without the restart, and a streamed response cut by
 * the shutdown is kept as it was streamed (`incomplete`), a background one too with its whole
 * stream; one whose server was killed is `failed`, a background one showing the text its stream
 * kept, as its replay does. PARLEY_RESPONSES_TTL_DAYS expires old ones.
 */
import { Database } from "bun:sqlite";
import { afterAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import OpenAI from "openai";
import { allowSlowTests, type ChildServer, rejection, startServer, tempDir, until } from "../support";

allowSlowTests();

const adminKey = "responses-restart-admin-key-0123456789ab";
const started: ChildServer[] = [];
afterAll(() => {
  for (const server of started) server.child.kill("SIGKILL");
});

/**
 * `parley serve` on the bench model (it never ends a reply by itself) and this database. Without
 * speculation: the continued reply is compared with the unrestarted one token for token, and on
 * bench-small's near-ties that holds only where both evaluate alike, while a draft's batch takes
 * llama.cpp's several-token kernels, whose sums differ from the one-token ones in the last bits
 * (test/llm/speculation.test.ts covers exactness where the models' logits are apart).
 */
async function serve(dbPath: string, env: Record<string, string> = {}) {
  const server = await startServer({
    dbPath,
    adminKey,
    preset: "bench-small",
    env: { PARLEY_CONTEXT_SIZE: "512", PARLEY_SHUTDOWN_GRACE_S: "1", PARLEY_SPECULATE: "off", ...env },
  });
  started.push(server);
  return { server, client: new OpenAI({ apiKey: adminKey, baseURL: `${server.url}/v1`, maxRetries: 0 }) };
}

const turn = { model: "any", temperature: 0, max_output_tokens: 8 } as const;

describe("kept responses across a restart", () => {
  test("a chain continues after SIGTERM and start as it does without them; a stream cut by the shutdown is kept as streamed", async () => {
    const dbPath = join(tempDir("responses-restart"), "parley.db");
    const before = await serve(dbPath);
    const first = await before.client.responses.create({ ...turn, input: "Hello" });
    const second = await before.client.responses.create({ ...turn, previous_response_id: first.id, input: "Tell me more" });
    const unrestarted = await before.client.responses.create({ ...turn, previous_response_id: second.id, input: "Thanks" });

    // A long reply, streamed until the shutdown's grace period ends it.
    const stream = before.client.responses.stream({ model: "any", temperature: 0, max_output_tokens: 400, input: "Go on" });
    let text = "";
    let responseId = "";
    const ended = (async () => {
      for await (const event of stream) {
        if (event.type === "response.created") responseId = event.response.id;
        if (event.type === "response.output_text.delta") text += event.delta;
        if (event.type === "response.incomplete") return event.response;
      }
      return undefined;
    })();
    await until(() => text !== "", "the first delta", 20_000);
    // And one in the background, followed until its first delta.
    const background = await before.client.responses.create({ model: "any", temperature: 0, max_output_tokens: 400, input: "Go on", background: true });
    for await (const event of await before.client.responses.retrieve(background.id, { stream: true })) if (event.type === "response.output_text.delta") break;
    before.server.child.kill("SIGTERM");
    const cut = await ended;
    expect(cut?.status).toBe("incomplete");
    expect(await before.server.child.exited).toBe(0);

    const after = await serve(dbPath);
    expect(await after.client.responses.retrieve(second.id)).toEqual(second);
    const continued = await after.client.responses.create({ ...turn, previous_response_id: second.id, input: "Thanks" });
    expect(continued.output_text).toBe(unrestarted.output_text);
    expect(continued.usage!.input_tokens).toBe(unrestarted.usage!.input_tokens);
    const kept = await after.client.responses.retrieve(responseId);
    expect(kept.status).toBe("incomplete");
    expect(kept.output_text).toBe(text);
    // The background response ended incomplete at the shutdown, its whole stream kept: replayed, it ends so.
    const replayed: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const event of await after.client.responses.retrieve(background.id, { stream: true })) replayed.push(event);
    expect(replayed.at(-1)!.type).toBe("response.incomplete");
    const backgroundKept = await after.client.responses.retrieve(background.id);
    expect(backgroundKept.status).toBe("incomplete");
    expect(replayed.flatMap((event) => (event.type === "response.output_text.delta" ? [event.delta] : [])).join("")).toBe(backgroundKept.output_text);

    // Killed while they generate: nothing will end them, so the next start marks them failed. A
    // background one first, once some of its text is kept.
    const orphan = await after.client.responses.create({ model: "any", temperature: 0, max_output_tokens: 400, input: "Go on", background: true });
    const events = new Database(dbPath, { readonly: true });
    const keptDelta = events.query("SELECT 1 FROM response_events WHERE response_id = ? AND type = 'response.output_text.delta' LIMIT 1");
    await until(() => keptDelta.get(orphan.id) !== null, "a delta of the background response kept", 20_000);
    events.close();
    const running = after.client.responses.stream({ model: "any", temperature: 0, max_output_tokens: 400, input: "Go on" });
    let killedId = "";
    // Killed from within the stream: leaving it first would be a disconnect, which ends the response.
    const cutOff = (async () => {
      for await (const event of running) {
        if (event.type === "response.created") killedId = event.response.id;
        if (event.type === "response.output_text.delta") after.server.child.kill("SIGKILL");
      }
    })().catch(() => undefined);
    await after.server.child.exited;
    await cutOff;
    const again = await serve(dbPath);
    const killed = await again.client.responses.retrieve(killedId);
    expect(killed).toMatchObject({ status: "failed", error: { code: "server_error" } });
    // The background one reads as its stream replays: the text kept so far, failed.
    const orphaned = await again.client.responses.retrieve(orphan.id);
    expect(orphaned).toMatchObject({ status: "failed", error: { code: "server_error" } });
    const orphanEvents: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const event of await again.client.responses.retrieve(orphan.id, { stream: true })) orphanEvents.push(event);
    const ending = orphanEvents.at(-1)!;
    if (ending.type !== "response.failed") throw new Error(`the replay ended with ${ending.type}`);
    const replayedText = orphanEvents.flatMap((event) => (event.type === "response.output_text.delta" ? [event.delta] : [])).join("");
    expect(replayedText).not.toBe("");
    expect(orphaned.output_text).toBe(replayedText);
    expect(ending.response.output).toEqual(orphaned.output);
    expect(await again.server.stop()).toBe(0);

    // PARLEY_RESPONSES_TTL_DAYS: a response created two days ago is gone at the next start, the rest stay, and /metrics counts them.
    const db = new Database(dbPath);
    db.run("UPDATE responses SET created_at = created_at - 2 * 86400000 WHERE id = ?", [first.id]);
    const stored = (db.query("SELECT count(*) AS n FROM responses").get() as { n: number }).n;
    db.close();
    const expiring = await serve(dbPath, { PARLEY_RESPONSES_TTL_DAYS: "1" });
    await until(async () => (await rejection(expiring.client.responses.retrieve(first.id))) instanceof OpenAI.NotFoundError, "the old response to expire");
    expect((await expiring.client.responses.retrieve(second.id)).id).toBe(second.id);
    const metrics = await (await fetch(`${expiring.server.url}/metrics`, { headers: { authorization: `Bearer ${adminKey}` } })).text();
    expect(metrics).toContain(`parley_responses_kept ${stored - 1}\n`);
    await expiring.server.stop();
  });
});
