/**
 * B15: the chat path's cost of a token quota (issue #35). Two Parley servers, one whose users are
 * all under a (never reached) default quota and one with none, alternating round by round: each
 * round is turns of a few conversations, timed from sending to the `done` event, since a quota's
 * work comes before the reply (measuring the prompt, holding) and after it (settling).
 */

import { median, sum } from "../../test/support/stats";
import { parleyTurn } from "./clients";
import { alternate, type Context, parley, type Row, type Scenario } from "./harness";
import { ADMIN_KEY } from "./procs";
import { userMessage } from "./text";

const CONVERSATIONS = 3;
const TURNS = 4;
const REPLY_TOKENS = 8;
const PARALLEL = 2;

type Quota = { name: "with a quota" | "without" };

/** Σ of the round's TTFT and of its turns' whole times, ms. */
async function round(url: string, run: number): Promise<{ ttft: number; total: number }> {
  const ttft: number[] = [];
  const total: number[] = [];
  for (let t = 0; t < TURNS; t++) {
    for (let c = 0; c < CONVERSATIONS; c++) {
      const started = performance.now();
      const turn = await parleyTurn(url, `q-${run}-${c}`, userMessage(30_000 + run * 100 + c * 10 + t, 16), REPLY_TOKENS);
      total.push(performance.now() - started);
      ttft.push(turn.ttftMs);
    }
  }
  return { ttft: sum(ttft), total: sum(total) };
}

async function setDefaultQuota(url: string): Promise<void> {
  const response = await fetch(`${url}/api/v1.0/admin/quotas/default`, {
    method: "PUT",
    headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" },
    body: JSON.stringify({ tokens: Number.MAX_SAFE_INTEGER, period: "day" }),
  });
  if (response.status !== 200) throw new Error(`setting the quota failed: HTTP ${response.status} ${await response.text()}`);
}

export const quotaCost: Scenario = {
  ids: ["B15"],
  async run(ctx: Context): Promise<Row[]> {
    const contenders: Quota[] = [{ name: "with a quota" }, { name: "without" }];
    const { runs } = await alternate(
      contenders,
      () => parley(ctx, PARALLEL),
      async (contender, server) => {
        if (contender.name === "with a quota") await setDefaultQuota(server.url);
        await round(server.url, -1);
      },
      (_contender, url, run) => round(url, run),
      ctx.runs * 3,
    );
    const of = (name: Quota["name"], field: "ttft" | "total") => median(runs[name]!.map((r) => r[field]));
    const what = `of ${CONVERSATIONS * TURNS} turns (${REPLY_TOKENS} reply tokens), a quota ÷ none`;
    return [
      {
        id: "B15",
        what: `Σ TTFT ms ${what}`,
        parley: of("with a quota", "ttft"),
        yardstick: of("without", "ttft"),
        ratio: of("with a quota", "ttft") / of("without", "ttft"),
        target: ["<=", 1.05],
        detail: runs,
      },
      {
        id: "B15",
        what: `Σ turn ms to done ${what}`,
        parley: of("with a quota", "total"),
        yardstick: of("without", "total"),
        ratio: of("with a quota", "total") / of("without", "total"),
        target: ["<=", 1.05],
      },
    ];
  },
};
