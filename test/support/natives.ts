/** What the tests of the scheduler and of Parley's own addon methods share (src/natives/decode-steps.cpp). */
import type { LlamaContext, LlamaModel, Token } from "node-llama-cpp";
import type { Prompter, Scheduler, Slot } from "../../src/llm/scheduler";
import { type Sampling, samplingOf } from "../../src/llm/types";
import { Sampler } from "../../src/natives/addon";
import { useLocalNatives } from "../../src/natives/local";

/**
 * The compiled natives' directory, now in use, or undefined where they are not built (`bun run
 * natives`): their tests skip then, except under CI, which compiles them first.
 */
export async function compiledNatives(): Promise<string | undefined> {
  const natives = await useLocalNatives();
  if (natives === undefined && Bun.env.CI === "true") throw new Error("no compiled natives: CI compiles them (bun run natives) before the tests");
  return natives;
}

/** A greedy sampler that never samples an end of generation: a call ends only at its step count or an abort. */
export function endlessSampler(context: LlamaContext, model: LlamaModel): Sampler {
  const sampler = new Sampler(context, model, samplingOf({ temperature: 0 }));
  const vocabulary = model.fileInfo.metadata.tokenizer.ggml.tokens.length;
  const eog = Array.from({ length: vocabulary }, (_, token) => token).filter((token) => model.isEogToken(token as Token));
  sampler.native.applyConfig({ tokenBiasKeys: Uint32Array.from(eog), tokenBiasValues: new Float32Array(eog.length).fill(-Infinity) });
  return sampler;
}

/** A prompt that evaluates `input` after all the slot holds. */
export const continuing =
  (input: readonly Token[]): Prompter =>
  (slot) => ({ tokens: [...slot.sequence.contextTokens, ...input], reusable: Infinity });

/** A turn of no conversation: `input` after what the slot holds, to its end (`onToken` said stop, or the signal aborted). */
export function runTurn(
  scheduler: Scheduler,
  slot: Slot,
  input: readonly Token[] | Promise<readonly Token[]>,
  {
    sampling,
    onToken,
    signal = new AbortController().signal,
    maxTokens,
  }: { sampling: Sampling; onToken(token: Token): boolean; signal?: AbortSignal; maxTokens?: number },
): Promise<void> {
  const prompt = input instanceof Promise ? input.then(continuing) : continuing(input);
  return scheduler.run({ slot, scope: "", prompt, sampling, signal, onToken, ...(maxTokens !== undefined ? { maxTokens } : {}) });
}
