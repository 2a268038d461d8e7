/**
 * Closed-loop load against a running server: each client sends one request at a time (a
 * streamed chat, a plain chat or a listing) until the time is up. Used by the light load test
 * and by `bun run bench load`.
 */
import { openStorage } from "../../src/db/open";
import { bearer, postChat } from "./http";
import type { Random } from "./random";
import { readSse } from "./sse";
import { peakResident } from "./stats";

export interface LoadOptions {
  url: string;
  /** Client i uses keys[i % keys.length]: sharing keys brings the per-key limits into play. */
  keys: string[];
  clients: number;
  durationMs: number;
  /** A request not finished by then counts as hung. */
  deadlineMs: number;
  maxTokens: number;
  /** Sampled for its RSS every 100 ms while the load runs. */
  pid?: number;
  /**
   * After a 429/503, wait what `Retry-After` says (as a well-behaved client does) instead of a
   * few ms (a client hammering on, which fills the limits in a short test).
   */
  honourRetryAfter?: boolean;
  /** Spreads the hammering clients' retries. */
  random: Random;
}

export type Outcome = "200" | "429" | "503" | "hung" | "stream error" | "connection error" | `other ${number}`;

export interface LoadResult {
  requests: number;
  outcomes: Record<string, number>;
  /** Milliseconds from sending to the last byte, for every request that ended. */
  latencies: number[];
  maxRssKb: number;
  /** The first few odd outcomes, for the failure message. */
  samples: string[];
}

type Kind = "stream" | "chat" | "list";

async function one(options: LoadOptions, key: string, kind: Kind, conversation: string): Promise<{ outcome: Outcome; detail?: string; retryAfter?: number }> {
  const signal = AbortSignal.timeout(options.deadlineMs);
  try {
    const response =
      kind === "list"
        ? await fetch(`${options.url}/api/v1.0/chat/messages?rows_per_page=50&sort_by=id:desc`, { headers: bearer(key), signal })
        : await postChat(
            options.url,
            key,
            { message: "Tell me something", conversation_id: conversation, stream: kind === "stream", max_tokens: options.maxTokens },
            signal,
          );
    if (response.status !== 200 || kind !== "stream") {
      const text = await response.text();
      const outcome: Outcome =
        response.status === 200 || response.status === 429 || response.status === 503 ? (String(response.status) as Outcome) : `other ${response.status}`;
      const retryAfter = Number(response.headers.get("retry-after") ?? NaN);
      return { outcome, detail: outcome.startsWith("other") ? text.slice(0, 200) : undefined, retryAfter };
    }
    let last = "";
    for await (const event of readSse(response)) last = event.event;
    return last === "done" ? { outcome: "200" } : { outcome: "stream error", detail: `stream ended with ${last}` };
  } catch (error) {
    if (signal.aborted) return { outcome: "hung", detail: `${kind} past ${options.deadlineMs} ms` };
    return { outcome: "connection error", detail: String(error) };
  }
}

export async function runLoad(options: LoadOptions): Promise<LoadResult> {
  const result: LoadResult = { requests: 0, outcomes: {}, latencies: [], maxRssKb: 0, samples: [] };
  const endAt = Date.now() + options.durationMs;
  const kinds: Kind[] = ["stream", "chat", "list"];
  const clients = () =>
    Promise.all(
      Array.from({ length: options.clients }, async (_, client) => {
        const key = options.keys[client % options.keys.length]!;
        for (let i = 0; Date.now() < endAt; i++) {
          const kind = kinds[(client + i) % kinds.length]!;
          const started = performance.now();
          const { outcome, detail, retryAfter } = await one(options, key, kind, `load-${client}-${i % 3}`);
          result.latencies.push(performance.now() - started);
          result.requests++;
          result.outcomes[outcome] = (result.outcomes[outcome] ?? 0) + 1;
          if (detail !== undefined && result.samples.length < 5) result.samples.push(`${outcome}: ${detail}`);
          if (outcome === "429" || outcome === "503") {
            const waitMs = options.honourRetryAfter && retryAfter! > 0 ? retryAfter! * 1000 : 20 + options.random.next() * 30;
            await Bun.sleep(Math.min(waitMs, Math.max(0, endAt - Date.now())));
          }
        }
      }),
    );
  if (options.pid === undefined) await clients();
  else result.maxRssKb = (await peakResident(options.pid, clients)).peak.rss;
  return result;
}

/** Creates the keys before the server first opens the database (it then makes no admin key of its own). */
export async function seedKeys(dbPath: string, users: number): Promise<{ admin: string; users: string[] }> {
  await using storage = await openStorage(dbPath);
  const admin = (await storage.keys.create("ops", "admin")).key;
  const userKeys: string[] = [];
  for (let i = 0; i < users; i++) userKeys.push((await storage.keys.create(`load-${i}`, "user")).key);
  return { admin, users: userKeys };
}

/** Queue depth and busy sequences as the server reports them on /metrics. */
export async function engineGauges(url: string, adminKey: string): Promise<{ queued: number; busy: number }> {
  const text = await (await fetch(`${url}/metrics`, { headers: bearer(adminKey) })).text();
  const gauge = (name: string) => Number(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, "m").exec(text)?.[1] ?? NaN);
  return { queued: gauge("parley_queue_depth"), busy: gauge("parley_sequences_busy") };
}
