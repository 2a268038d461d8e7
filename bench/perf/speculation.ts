/**
 * B17 and B18, replies that repeat their context (issue #50): each turn pastes ~300 tokens the
 * model itself wrote (a new text every turn), one word changed, and asks for it back; one stream
 * (B17), then 4 and 8 (B18). B17 is the decode rate (its one stream's first token to its last);
 * B18 all streams' tokens over the time from the requests' sending: Parley evaluates the prompts'
 * ends one by one and its first replies start sooner (B8 says why), so a window from the first
 * token would hold three of the four prompts for it and none for llama-server. Parley as it starts by default (PARLEY_SPECULATE=auto) against llama-server by default
 * and with its lookup speculation `--spec-type ngram-mod` (the best of its n-gram kinds on this
 * text: ../shared/notes/stack-facts.md), all up together and alternating. Parley's acceptance comes
 * from its /metrics; bench-small's greedy replies cycle, as a reply that quotes code does.
 */
import { median } from "../../test/support/stats";
import type { TurnTiming } from "./clients";
import { aggregateTps, endToEndTps } from "./concurrency";
import { alternate, type Context, type Row, ratio, type Scenario, sides } from "./harness";
import { ADMIN_KEY, startLlamaServer } from "./procs";
import { userMessage } from "./text";

const PASTED_TOKENS = 300;
const SPEC_FLAGS = ["--spec-type", "ngram-mod"];

type Name = "parley" | "llamaServer" | "llamaServerSpec";

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
    const [me, them] = sides(ctx);
    const rounds = ctx.runs * 2;
    // The chart's bars: each stream count's medians, on B17's row.
    const chart = { categories: [] as string[], parley: [] as number[], llamaServer: [] as number[] };
    for (const streams of [1, 4, 8]) {
      const yardstick = (flags: string[]) => () =>
        startLlamaServer({ binary: ctx.llamaServer!, model: ctx.model, threads: ctx.threads, parallel: streams, contextSize: ctx.contextSize, flags });
      const contenders = [
        { name: "parley" as Name, side: me!, start: me!.start(streams) },
        ...(them
          ? [
              { name: "llamaServer" as Name, side: them, start: yardstick([]) },
              { name: "llamaServerSpec" as Name, side: them, start: yardstick(SPEC_FLAGS) },
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
      const windows: Partial<Record<Name, number[]>> = {};
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
      const [tps, plain, spec] = [median(runs.parley!), runs.llamaServer && median(runs.llamaServer), runs.llamaServerSpec && median(runs.llamaServerSpec)];
      const what = streams === 1 ? "repeating replies, decode tok/s, 1 stream" : `repeating replies, tok/s from the requests' sending, ${streams} streams`;
      const detail = {
        parley: runs.parley,
        llamaServer: runs.llamaServer,
        llamaServerSpec: runs.llamaServerSpec,
        decodeWindows: windows,
        parleyDrafts: { accepted, rejected, acceptance: accepted / (accepted + rejected) },
      };
      chart.categories.push(String(streams));
      chart.parley.push(tps);
      chart.llamaServer.push(plain ?? Number.NaN);
      const id = streams === 1 ? "B17" : "B18";
      rows.push({
        id,
        what: `${what} vs llama-server's default`,
        parley: tps,
        yardstick: plain,
        ratio: ratio(tps, plain),
        target: [">=", streams === 1 ? 1.5 : 1.2],
        detail,
      });
      rows.push({ id, what: `${what} vs llama-server ${SPEC_FLAGS.join(" ")}`, parley: tps, yardstick: spec, ratio: ratio(tps, spec), target: [">=", 1.0] });
    }
    rows[0]!.detail = { ...(rows[0]!.detail as object), chart: them ? chart : { categories: chart.categories, parley: chart.parley } };
    return rows;
  },
};
