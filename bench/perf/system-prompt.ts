/**
 * B13: new conversations under a long shared system prompt (issue #34): the first turn of 8 new
 * conversations with a 1,000-token `PARLEY_SYSTEM_PROMPT`, against the same with none. A new
 * conversation should not pay for evaluating the operator's prompt again. llama-server alongside,
 * given the same system message in each request, with its prompt cache.
 */

import { median, sum } from "../../test/support/stats";
import { llamaServerTurn, parleyTurn } from "./clients";
import { type Context, freshDb, inTurn, parley, type Row, type Scenario, withServer, yardstick } from "./harness";
import { userMessage } from "./text";

const CONVERSATIONS = 8;
const SYSTEM_TOKENS = 1000;
const PARALLEL = 2;
const REPLY_TOKENS = 8;

type Config = { name: string; system: boolean; llama: boolean };

/** Σ of the first turns' TTFT, ms, of `CONVERSATIONS` new conversations on a fresh server. */
async function firstTurns(ctx: Context, config: Config, system: string, run: number): Promise<number> {
  const start = config.llama ? yardstick(ctx, PARALLEL) : parley(ctx, PARALLEL, freshDb(ctx), config.system ? { PARLEY_SYSTEM_PROMPT: system } : {});
  return withServer(start, async (server) => {
    const ttft: number[] = [];
    for (let c = 0; c < CONVERSATIONS; c++) {
      const message = userMessage(20_000 + run * 100 + c, 24);
      const turn = config.llama
        ? await llamaServerTurn(
            server.url,
            [...(config.system ? [{ role: "system" as const, content: system }] : []), { role: "user", content: message }],
            REPLY_TOKENS,
          )
        : await parleyTurn(server.url, `new-${run}-${c}`, message, REPLY_TOKENS);
      ttft.push(turn.ttftMs);
    }
    return sum(ttft);
  });
}

export const sharedSystemPrompt: Scenario = {
  ids: ["B13"],
  async run(ctx: Context): Promise<Row[]> {
    const systemTokens = ctx.quick ? 200 : SYSTEM_TOKENS;
    const system = userMessage(424_242, systemTokens);
    const configs: Config[] = [
      { name: "parley with", system: true, llama: false },
      { name: "parley without", system: false, llama: false },
      ...(ctx.llamaServer === undefined
        ? []
        : [
            { name: "llama-server with", system: true, llama: true },
            { name: "llama-server without", system: false, llama: true },
          ]),
    ];
    const sums: Record<string, number[]> = {};
    // Each run starts every configuration's server afresh, the order reversed run by run.
    for (let run = 0; run < ctx.runs; run++)
      for (const config of inTurn(configs, run)) (sums[config.name] ??= []).push(await firstTurns(ctx, config, system, run));
    const of = (name: string) => (sums[name] ? median(sums[name]!) : undefined);
    const theirs = of("llama-server with") !== undefined ? of("llama-server with")! / of("llama-server without")! : undefined;
    return [
      {
        id: "B13",
        what: `Σ first-turn TTFT of ${CONVERSATIONS} new conversations, a ${systemTokens}-token system prompt ÷ none`,
        parley: of("parley with"),
        yardstick: of("llama-server with"),
        ratio: of("parley with")! / of("parley without")!,
        target: ["<=", 1.3],
        detail: { sums, llamaServerRatio: theirs },
      },
    ];
  },
};
