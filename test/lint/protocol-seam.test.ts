/**
 * The seam between protocols and the domain: below `src/http/` no file names a field of any
 * protocol's wire format, and no protocol's files import another protocol's. A protocol is its
 * folder under `src/http/` and its route files.
 */
import { describe, expect, test } from "bun:test";
import { dirname, relative, resolve } from "node:path";
import { Glob } from "bun";

const PROTOCOLS: Record<string, { folder: string; routes: string[] }> = {
  openai: { folder: "src/http/openai/", routes: ["src/http/routes/openai.ts", "src/http/routes/responses.ts", "src/http/routes/openai-conversations.ts"] },
  anthropic: { folder: "src/http/anthropic/", routes: ["src/http/routes/anthropic.ts"] },
  ollama: { folder: "src/http/ollama/", routes: ["src/http/routes/ollama.ts"] },
  infill: { folder: "src/http/infill/", routes: ["src/http/routes/infill.ts"] },
};

/** Field paths and item types of the protocols' requests, which the domain has words of its own for. */
const WIRE_FIELDS =
  /function\.parameters|response_format|input_schema|tool_choice|logit_bias|previous_response_id|text\.format|max_output_tokens|max_tokens|budget_tokens|stream_options|function_call|tool_use|tool_result|input_prefix|input_suffix|input_extra/;

const files = async (pattern: string) => Array.fromAsync(new Glob(pattern).scan("."));
const importsOf = (text: string) => Array.from(text.matchAll(/^import[^"']*["']([^"']+)["']/gm), (match) => match[1]!);

describe("the protocol seam", () => {
  test("nothing under src/llm/, src/chat/ or src/db/ names a protocol's field or item", async () => {
    const named: string[] = [];
    for (const path of [...(await files("src/llm/**/*.ts")), ...(await files("src/chat/**/*.ts")), ...(await files("src/db/**/*.ts"))]) {
      const lines = (await Bun.file(path).text()).split("\n");
      lines.forEach((line, i) => {
        if (WIRE_FIELDS.test(line)) named.push(`${path}:${i + 1}: ${line.trim().slice(0, 100)}`);
      });
    }
    expect(named).toEqual([]);
  });

  test("no protocol's files import another protocol's folder", async () => {
    const crossings: string[] = [];
    for (const [name, own] of Object.entries(PROTOCOLS)) {
      const others = Object.entries(PROTOCOLS).filter(([other]) => other !== name);
      for (const path of [...(await files(`${own.folder}**/*.ts`)), ...own.routes]) {
        for (const specifier of importsOf(await Bun.file(path).text())) {
          if (!specifier.startsWith(".")) continue;
          const target = relative(".", resolve(dirname(path), specifier)).replace(/\.ts$/, "");
          for (const [, { folder, routes }] of others) {
            if (`${target}/`.startsWith(folder) || target.startsWith(folder) || routes.some((route) => route.replace(/\.ts$/, "") === target))
              crossings.push(`${path} imports ${specifier}`);
          }
        }
      }
    }
    expect(crossings).toEqual([]);
  });
});
