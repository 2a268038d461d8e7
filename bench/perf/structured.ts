/**
 * B14: the decode rate of a reply held to a JSON schema (nested objects, an array, an enum), both
 * servers given the same `response_format` and each enforcing it with its own grammar: what
 * constrained decoding costs Parley against what it costs llama-server.
 */

import { alternating, compared, type Scenario, type Side, type SideName } from "./harness";
import { userMessage } from "./text";

const SCHEMA = {
  type: "object",
  properties: {
    title: { type: "string" },
    author: { type: "object", properties: { name: { type: "string" }, born: { type: "integer" } }, required: ["name", "born"], additionalProperties: false },
    tags: { type: "array", items: { type: "string" } },
    kind: { enum: ["story", "poem", "essay"] },
    done: { type: "boolean" },
  },
  required: ["title", "author", "tags", "kind", "done"],
  additionalProperties: false,
};

const RESPONSE_FORMAT = { response_format: { type: "json_schema", json_schema: { name: "work", schema: SCHEMA } } };

export const structuredOutput: Scenario = {
  ids: ["B14"],
  async run(ctx) {
    const ask = (side: Side, url: string, tag: string, seed: number) => side.ask(url, tag, userMessage(seed, 50), ctx.decodeTokens, undefined, RESPONSE_FORMAT);
    const b14 = await alternating(
      ctx,
      1,
      // Warm: the grammar's first use and the per-token path compiled, as B8 warms up.
      (side, server) => ask(side, server.url, "b14-warm", 800),
      (side, url, r) => ask(side, url, `b14-${r}`, 801 + r),
      ctx.rounds,
    );
    const tps = (name: SideName) => b14.runs[name]?.map((run) => run.decodeTps);
    const tokens = (name: SideName) => b14.runs[name]?.map((run) => run.completionTokens);
    return [
      compared(
        {
          id: "B14",
          what: "decode tok/s, a reply held to a JSON schema",
          target: [">=", 0.95],
          workload: ctx.workload,
          detail: { completionTokens: { parley: tokens("parley"), llamaServer: tokens("llamaServer") }, schema: SCHEMA },
        },
        tps("parley"),
        tps("llamaServer"),
      ),
    ];
  },
};
