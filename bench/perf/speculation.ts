/**
 * B17 and B18, replies that repeat their context (issue #50): each turn pastes ~300 tokens the
 * model itself wrote (a new text every turn), one word changed, and asks for it back; one stream
 * (B17), then 4 and 8 (B18). B17 is the decode rate (its one stream's first token to its last);
 * B18 all streams' tokens over the time from the requests' sending: Parley evaluates the prompts'
 * ends one by one and its first replies start sooner (B8 says why), so a window from the first
 * token would hold three of the four prompts for it and none for llama-server. Parley as it starts by default (PARLEY_SPECULATE=auto) against llama-server by default
 * and at each of its n-gram speculation settings (`LLAMA_SPECULATION`), all up together and
 * alternating; each stream count's rows compare Parley with llama-server's default and with the
 * best of its settings there (by median), so a lead is claimed only over llama-server at its best. Parley's acceptance comes
 * from its /metrics; bench-small's greedy replies cycle, as a reply that quotes code does.
 */
import { median } from "../../test/support/stats";
import type { TurnTiming } from "./clients";
import { aggregateTps, endToEndTps } from "./concurrency";
import { alternate, type Context, compared, type Row, type Scenario, sides } from "./harness";
import type { Interval } from "./paired";
import { ADMIN_KEY, startLlamaServer } from "./procs";
import { userMessage } from "./text";

const PASTED_TOKENS = 300;

/**
 * llama-server's lookup speculation as swept: each n-gram kind at its defaults (ngram-mod looks up
 * 24 tokens and drafts 48-64), and shorter lookups and drafts, which a 128-token reply of a
 * 300-token text can use sooner.
 */
export const LLAMA_SPECULATION: Record<string, string[]> = {
  "ngram-mod": ["--spec-type", "ngram-mod"],
  "ngram-mod, match 12, draft 8-32": [
    "--spec-type",
    "ngram-mod",
    "--spec-ngram-mod-n-match",
    "12",
    "--spec-ngram-mod-n-min",
    "8",
    "--spec-ngram-mod-n-max",
    "32",
  ],
  "ngram-mod, match 6, draft 2-16": [
    "--spec-type",
    "ngram-mod",
    "--spec-ngram-mod-n-match",
    "6",
    "--spec-ngram-mod-n-min",
    "2",
    "--spec-ngram-mod-n-max",
    "16",
  ],
  "ngram-simple": ["--spec-type", "ngram-simple"],
  "ngram-simple, 4 → 16": ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "4", "--spec-ngram-simple-size-m", "16"],
  "ngram-map-k": ["--spec-type", "ngram-map-k"],
};

/** The text with its `n`th word (counted from the middle) replaced: one change, a different one per stream. */
function changed(text: string, n: number): string {
  const words = text.split(" ");
  const at = Math.floor(words.length / 2) + n;
  words[at % words.length] = "zozoba";
  return words.join(" ");
}

/** Parley's drafted and accepted tokens so far, from its metrics. */
async function drafts(url: string): Promise<{ accepted: number; rejected: number }> {
  const text = await (await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${ADMIN_KEY}` } })).text();
  const count = (outcome: string) => Number(new RegExp(`^parley_draft_tokens_total\\{outcome="${outcome}"\\} (\\S+)$`, "m").exec(text)?.[1] ?? Number.NaN);
  return { accepted: count("accepted"), rejected: count("rejected") };
}

export const speculation: Scenario = {
  ids: ["B17", "B18"],
  async run(ctx: Context): Promise<Row[]> {
    const rows: Row[] = [];
    // Parley as it starts, greedy: the quoting workload.
    const [me, them] = sides(ctx, "quoting");
    const rounds = ctx.runs * 2;
    // The chart's bars: each stream count's medians, on B17's row (llama-server's best setting).
    const chart = { categories: [] as string[], parley: [] as number[], llamaServer: [] as number[], ratios: [] as (Interval | null)[] };
    for (const streams of [1, 4, 8]) {
      const yardstick = (flags: string[]) => () =>
        startLlamaServer({ binary: ctx.llamaServer!, model: ctx.model, threads: ctx.threads, parallel: streams, contextSize: ctx.contextSize, flags });
      const contenders = [
        { name: "parley", side: me!, start: me!.start(streams) },
        ...(them
          ? [
              { name: "llama-server", side: them, start: yardstick([]) },
              ...Object.entries(LLAMA_SPECULATION).map(([setting, flags]) => ({ name: `llama-server ${setting}`, side: them, start: yardstick(flags) })),
            ]
          : []),
      ];
      type Contender = (typeof contenders)[number];
      // The model's own texts, a new one for every turn: llama-server's n-gram speculation keeps
      // what a slot decoded across requests, and a text it had answered before would be drafted
      // from its own earlier reply. Written by Parley's warm-up, round 0 the warm-up's own.
      const texts: string[][] = [];
      const round = (contender: Contender, url: string, run: number): Promise<TurnTiming[]> =>
        Promise.all(
          Array.from({ length: streams }, (_, i) =>
            contender.side.ask(url, `spec-${run}-${i}`, `Here is a text: ${changed(texts[run]![i]!, i)} Write it out again.`, ctx.decodeTokens),
          ),
        );
      // Each run's decode window (first token to last), beside the ratio's measure.
      const windows: Record<string, number[]> = {};
      let accepted = 0;
      let rejected = 0;
      const { runs } = await alternate(
        contenders,
        (contender) => contender.start,
        async (contender, server) => {
          for (let run = texts.length; run <= rounds; run++) {
            texts.push(
              (
                await Promise.all(
                  Array.from({ length: streams }, (_, i) =>
                    contender.side.ask(server.url, `spec-source-${run}-${i}`, userMessage(17_000 + 100 * run + i, 50), PASTED_TOKENS),
                  ),
                )
              ).map(({ reply }) => reply),
            );
          }
          await round(contender, server.url, 0);
        },
        async (contender, url, run) => {
          const before = contender.name === "parley" ? await drafts(url) : undefined;
          const turns = await round(contender, url, run + 1);
          const tps = streams === 1 ? aggregateTps(turns) : endToEndTps(turns);
          (windows[contender.name] ??= []).push(aggregateTps(turns));
          if (before) {
            const after = await drafts(url);
            accepted += after.accepted - before.accepted;
            rejected += after.rejected - before.rejected;
          }
          return tps;
        },
        rounds,
      );
      const measured = runs as Record<string, number[]>;
      const settings = Object.keys(LLAMA_SPECULATION).map((setting) => `llama-server ${setting}`);
      const best = settings.filter((name) => measured[name]).sort((a, b) => median(measured[b]!) - median(measured[a]!))[0];
      const what = streams === 1 ? "repeating replies, decode tok/s, 1 stream" : `repeating replies, tok/s from the requests' sending, ${streams} streams`;
      const detail = { rounds: measured, decodeWindows: windows, parleyDrafts: { accepted, rejected, acceptance: accepted / (accepted + rejected) }, best };
      const id = streams === 1 ? "B17" : "B18";
      const target: Row["target"] = [">=", streams === 1 ? 1.5 : 1.2];
      rows.push(compared({ id, what: `${what} vs llama-server's default`, target, workload: "quoting", detail }, measured.parley, measured["llama-server"]));
      if (best !== undefined) {
        rows.push(
          compared(
            { id, what: `${what} vs llama-server's best speculation setting`, target: [">=", 1.0], workload: "quoting", detail: { best } },
            measured.parley,
            measured[best],
          ),
        );
      }
      chart.ratios.push(rows.at(-1)?.interval ?? null);
      chart.categories.push(String(streams));
      chart.parley.push(median(measured.parley!));
      chart.llamaServer.push(best ? median(measured[best]!) : Number.NaN);
    }
    rows[0]!.detail = { ...(rows[0]!.detail as object), chart: them ? chart : { categories: chart.categories, parley: chart.parley } };
    return rows;
  },
};
