/**
 * llama-server's `samplers`: the samplers a completion is drawn through, in order, a sampler left
 * out doing nothing (no penalties without `penalties`, no cut without `top_k`; without
 * `temperature`, the draw is from the model's own distribution). Parley's chain runs in
 * llama-server's default order with its `infill` sampler last, just before the draw: a list in that
 * order is honoured; another order would draw another completion, and is refused.
 */
import { InvalidInput } from "../../errors";
import type { SamplingRequest } from "../../llm/engine";

/** llama-server's default chain (common/common.h), then the infill sampler llama.vscode and llama.vim ask for. */
export const SAMPLER_ORDER = ["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature", "infill"] as const;
type SamplerName = (typeof SAMPLER_ORDER)[number];

/** llama-server's spellings of the names (common/sampling.cpp): kebab-case or without the underscore, and three words of its own. */
const SPELLINGS = new Map<string, SamplerName>([
  ...SAMPLER_ORDER.flatMap((known) => [known, known.replaceAll("_", "-"), known.replaceAll("_", "")].map((spelled) => [spelled, known] as const)),
  ["nucleus", "top_p"],
  ["temp", "temperature"],
  ["typ", "typ_p"],
]);

/** A name as llama-server reads it, in any case. */
const canonical = (name: string): SamplerName | undefined => SPELLINGS.get(name.toLowerCase());

/**
 * What a `samplers` list makes of the request's sampling: the fields of the samplers it leaves out
 * neutral, and the infill sampler where it names it. Samplers of llama-server's chain that Parley
 * does not have (`dry`, `top_n_sigma`, `typ_p`, `xtc`) do nothing at llama-server's defaults,
 * which this API cannot change, so naming them is naming nothing.
 */
export function chainOf(samplers: readonly string[], sampling: SamplingRequest): SamplingRequest {
  let last = -1;
  const named = new Set<SamplerName>();
  for (const [i, name] of samplers.entries()) {
    const sampler = canonical(name);
    if (!sampler) throw new InvalidInput(`samplers[${i}]`, `${JSON.stringify(name)} is no sampler Parley has: it has ${SAMPLER_ORDER.join(", ")}`);
    const at = SAMPLER_ORDER.indexOf(sampler);
    if (at <= last)
      throw new InvalidInput(
        `samplers[${i}]`,
        `Parley's samplers run in one order, once each (${SAMPLER_ORDER.join(", ")}): ${JSON.stringify(name)} here would draw another completion`,
      );
    last = at;
    named.add(sampler);
  }
  return {
    ...sampling,
    ...(named.has("penalties") ? {} : { repeatPenalty: 1, presencePenalty: 0, frequencyPenalty: 0 }),
    ...(named.has("top_k") ? {} : { topK: 0 }),
    ...(named.has("top_p") ? {} : { topP: 1 }),
    ...(named.has("min_p") ? {} : { minP: 0 }),
    ...(named.has("temperature") ? {} : { temperature: 1 }),
    ...(named.has("infill") ? { infillSampler: true } : {}),
  };
}
