/**
 * Saved KV states: a conversation whose sequence was handed to another comes back by loading its
 * state file (one read) instead of re-evaluating its whole history, and warm conversations
 * survive a restart. Each conversation has two files under `<dir>/<model id>/`:
 *   `<hash>.kv`   llama.cpp's sequence state (KV cache + the tokens it holds), and
 *   `<hash>.json` its sidecar: the transcript (rendered text + exact tokens) that makes the next
 *                 turn token-exact, the state file's size, and a checksum over both.
 * Both are written under temporary names and renamed, so a reader never sees a partial file. The
 * model id covers the file's identity and the llama.cpp build, because loading a state made by
 * another model can crash the process.
 *
 * llama.cpp trusts a state file: a truncated one aborts the process (GGML_ASSERT), a damaged cell
 * count or position makes it allocate without limit, and damaged tensor data loads as if valid
 * (wrong replies). So nothing reaches llama.cpp that is not byte for byte what it wrote here:
 * `find` checks the sidecar's counts and the file's size against the context, then the digest,
 * and only what it checked is loaded. A pair that fails is deleted with a warning, and the caller
 * re-evaluates the conversation from its history.
 *
 * The cache is optional and must never cost a chat: every failure here is a warning, never an
 * error, and the files stay under a byte budget and above a free-space reserve on their
 * filesystem (which the database shares), both kept by deleting the least recently used pairs.
 *
 * With the compiled natives and a `StateMemory`, a state is saved into memory first (a copy, not
 * a file written on the loop) and reaches its files only once memory has no room for it, or when
 * the engine closes (`persist`): a crash loses the states held in memory (their conversations are
 * evaluated again from their history), never a file's integrity.
 */
import { createHash, randomUUID } from "node:crypto";
import { statfsSync } from "node:fs";
import { mkdir, open, readdir, readFile, rename, rm, stat, utimes, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { type LlamaContext, type LlamaContextSequence, type LlamaModel, LlamaText, type LlamaTextJSON, type Token } from "node-llama-cpp";
import { copyState, restoreState, type SequenceState, stateFileParts } from "../natives/addon";
import type { HeldState, StateMemory } from "./state-memory";
import type { Transcript } from "./transcript";
import type { Turn } from "./types";

export interface KvStoreOptions {
  root: string;
  /** Must change whenever a state could not be loaded safely: model file, llama.cpp build, cache types. */
  identity: string;
  /** Byte budget for all files. */
  maxBytes: number;
  /** Tokens per sequence: no state may hold more. */
  contextSize: number;
  /** The largest state file a sequence can write (see `stateSizeBound`). */
  maxStateBytes: number;
  /** Where states are kept before their files: only with natives that copy states (`copiesStates`). */
  memory?: StateMemory;
  warn: (message: string, error: unknown) => void;
}

interface Entry {
  bytes: number;
  usedAt: number;
}

/** A state in memory, with the transcript its sidecar will hold. */
interface Held extends HeldState {
  state: SequenceState;
  saved: SavedTranscript;
}

interface SavedTranscript {
  key: string;
  text: LlamaTextJSON;
  tokens: Token[];
  opens?: Turn;
}

/**
 * Sidecars without this format are deleted, not trusted: written before states were checksummed
 * (1), or with SHA-256 (2), which held the main thread several times longer than xxHash3 on every
 * save and every load, for a check that guards against damage, not an adversary (one who can write
 * the state can write its sidecar too).
 */
const FORMAT = 3;

/** A save announced (`KvStore.save`), to be captured from the sequence once. */
export interface PendingSave {
  capture(sequence: LlamaContextSequence): Promise<{ written: Promise<boolean> }>;
}

/** A saved state that passed `verify`, or was held in memory, ready to load. */
export interface Found {
  base: string;
  transcript: Transcript;
  /** The state, where it was held in memory. */
  state?: SequenceState;
}

interface Sidecar {
  format: typeof FORMAT;
  kvBytes: number;
  /** `digestOf` the state file and `JSON.stringify(transcript)`. */
  digest: string;
  transcript: SavedTranscript;
}

/**
 * Free space a save must leave on the filesystem, so that the database beside the cache can always
 * grow: a twentieth of the filesystem (the margin most filesystems keep for their own use), and
 * at least 2 MiB, many turns' worth of database writes (a turn commits a few dozen 4 KiB pages
 * at most) between two saves, when the cache checks again.
 */
const RESERVE_MIN_BYTES = 2 * 2 ** 20;
const RESERVE_FRACTION = 0.05;

/** A sidecar is JSON of the transcript: its tokens and their text, far below this per token. */
const SIDECAR_BYTES_PER_TOKEN = 1024;

const hash = (value: string) => createHash("sha256").update(value).digest("hex").slice(0, 32);

/**
 * Deletes the conversation's saved states under `root`, of every model, loaded or not: a deleted
 * conversation leaves no state for a model loaded later to find. A loaded model's store forgets
 * its own (`KvStore.forget`), waiting for its writes.
 */
export async function forgetSaved(root: string, key: string): Promise<void> {
  for (const model of await readdir(root).catch(() => [] as string[])) {
    const base = join(root, model, hash(key));
    for (const path of [`${base}.kv`, `${base}.json`]) await rm(path, { force: true }).catch(() => undefined);
  }
}

export class KvStore {
  /** Files by path (`.kv` and `.json` counted separately), across every model's directory. */
  private readonly entries = new Map<string, Entry>();
  private total = 0;
  /** Captures run one at a time, so that two never count the same free space. */
  private capturing: Promise<unknown> = Promise.resolve();
  /**
   * Saves not yet written, by the pair's path, from the moment they are announced (`save`): that
   * conversation's find or forget waits for them, or a turn arriving meanwhile would load the
   * state before it.
   */
  private readonly writing = new Map<string, Promise<boolean>>();
  /** Captured saves whose files are still being written, by the pair's path. */
  private readonly filing = new Map<string, Promise<boolean>>();
  /** What a state weighs per token, as the last save measured it (0 before any). */
  private bytesPerToken = 0;

  private constructor(
    private readonly options: KvStoreOptions,
    private readonly modelDir: string,
  ) {}

  static async open(options: KvStoreOptions): Promise<KvStore> {
    const store = new KvStore(options, join(options.root, hash(options.identity)));
    await mkdir(store.modelDir, { recursive: true });
    await store.scan();
    await store.evict();
    // A restart on a full disk gives space back before the first chat needs it.
    await store.makeRoom(0);
    return store;
  }

  /** Bytes currently on disk. */
  get size(): number {
    return this.total;
  }

  /**
   * Announces a save of the conversation: from now on its `find` and `forget` wait for it, so a
   * turn of that conversation arriving before the state is captured loads this state, not an
   * older one. `capture` writes it: it resolves once llama.cpp has written the state to a
   * temporary file, the only part that reads the sequence (its caller has the context to itself,
   * scheduler.ts); the rest (checksum, sidecar, renames, eviction) goes on behind `written`, which
   * settles false (with a warning) when the state was not saved. It never rejects; until it is
   * called, the conversation's `find`, `forget` and `settled` wait.
   */
  save(transcript: Transcript): PendingSave {
    const base = this.pathOf(transcript.key);
    const outcome = Promise.withResolvers<boolean>();
    this.awaited(base, outcome.promise);
    let captured = false;
    return {
      capture: (sequence) => {
        if (captured) throw new Error("a save is captured once");
        captured = true;
        const capturing = this.capturing.then(() => this.capture(base, sequence, transcript));
        this.capturing = capturing;
        void capturing.then(({ written }) => written).then(outcome.resolve);
        return capturing;
      },
    };
  }

  /** Has the conversation's `find` and `forget` wait for `outcome`, after what they waited for already. */
  private awaited(base: string, outcome: Promise<boolean>): void {
    const earlier = this.writing.get(base);
    const tracked: Promise<boolean> = Promise.all([earlier, outcome])
      .then(([, ok]) => ok)
      .finally(() => {
        if (this.writing.get(base) === tracked) this.writing.delete(base);
      });
    this.writing.set(base, tracked);
  }

  /** Resolves once every save so far has finished writing. */
  async settled(): Promise<void> {
    await this.capturing;
    await Promise.all(this.writing.values());
  }

  /** Writes the states this store holds in memory to their files, and waits for every save. */
  async persist(): Promise<void> {
    await this.capturing;
    this.options.memory?.spillAll(`${this.modelDir}/`);
    await this.settled();
  }

  /**
   * The conversation's saved state, checked (see `verify`) and ready to `load`: undefined when
   * there is none, or when it was unusable (then deleted, with a warning). Needs no sequence.
   */
  async find(key: string): Promise<Found | undefined> {
    const base = this.pathOf(key);
    await this.writing.get(base);
    const held = this.options.memory?.get(base) as Held | undefined;
    if (held) return { base, transcript: transcriptOf(held.saved), state: held.state };
    if (!this.entries.has(`${base}.kv`)) return undefined;
    try {
      const transcript = await this.verify(base, key);
      // Most recently used from now on: a save before the load must not evict it.
      const now = Date.now();
      this.touch(`${base}.kv`, now);
      this.touch(`${base}.json`, now);
      return { base, transcript };
    } catch (error) {
      return this.unusable(base, error);
    }
  }

  /**
   * Loads a found state into `sequence` and returns its transcript, or undefined when it failed
   * (the pair is deleted with a warning, the sequence left empty). Never throws.
   */
  async load(sequence: LlamaContextSequence, { base, transcript, state }: Found): Promise<Transcript | undefined> {
    try {
      await load(sequence, transcript, () => (state ? restoreState(sequence, state) : sequence.loadStateFromFile(`${base}.kv`, { acceptRisk: true })));
    } catch (error) {
      this.options.memory?.drop(base);
      return this.unusable(base, error);
    }
    if (state) return transcript;
    const now = new Date();
    await utimes(`${base}.kv`, now, now).catch(() => undefined);
    return transcript;
  }

  private async unusable(base: string, error: unknown): Promise<undefined> {
    await this.remove(base);
    this.options.warn("a saved KV state was unusable and is deleted; the conversation is re-evaluated from its history", error);
    return undefined;
  }

  private async capture(base: string, sequence: LlamaContextSequence, transcript: Transcript): Promise<{ written: Promise<boolean> }> {
    const { key, text, tokens, opens } = transcript;
    const saved: SavedTranscript = { key, text: text.toJSON(), tokens: [...tokens], ...(opens ? { opens } : {}) };
    const { memory } = this.options;
    if (memory && this.bytesPerToken * sequence.contextTokens.length <= memory.maxBytes) {
      return { written: Promise.resolve(await this.hold(memory, base, sequence, saved)) };
    }
    // An older state in memory would be found before this one's file.
    memory?.drop(base);
    // Two saves of one conversation never write its files at once. Only writes already captured
    // are waited for: an announced save is captured by a turn that may be waiting for this one.
    await this.filing.get(base);
    const tmp = `${base}.${randomUUID()}.tmp`;
    const transcriptJson = JSON.stringify(saved);
    const expected = this.bytesPerToken * sequence.contextTokens.length + transcriptJson.length;
    try {
      const room = await this.makeRoom(expected);
      if (room !== true) return { written: Promise.resolve(this.shortOfSpace(room)) };
      const { fileSize } = await sequence.saveStateToFile(`${tmp}.kv`);
      this.bytesPerToken = fileSize / Math.max(1, sequence.contextTokens.length);
      return { written: this.filed(base, this.finish(base, tmp, fileSize, saved, transcriptJson, expected)) };
    } catch (error) {
      return { written: Promise.resolve(await this.abandon(base, tmp, expected, error)) };
    }
  }

  /** Copies the sequence's state into memory; false (with a warning) where it could not. */
  private async hold(memory: StateMemory, base: string, sequence: LlamaContextSequence, saved: SavedTranscript): Promise<boolean> {
    try {
      const state = await copyState(sequence);
      this.bytesPerToken = state.bytes.byteLength / Math.max(1, state.tokens.length);
      const held: Held = { state, bytes: state.bytes.byteLength, saved, spill: () => this.spill(base, state, saved) };
      memory.put(base, held);
      return true;
    } catch (error) {
      this.options.warn("could not save a conversation's KV state; it will be re-evaluated when it returns", error);
      return false;
    }
  }

  /** Writes a state that leaves memory to its files, behind: the conversation's `find` waits for them. */
  private spill(base: string, state: SequenceState, saved: SavedTranscript): void {
    const written = (async () => {
      await this.filing.get(base);
      const tmp = `${base}.${randomUUID()}.tmp`;
      const transcriptJson = JSON.stringify(saved);
      const parts = stateFileParts(state);
      const fileSize = parts.reduce((sum, part) => sum + part.byteLength, 0);
      const expected = fileSize + transcriptJson.length;
      try {
        const room = await this.makeRoom(expected);
        if (room !== true) return this.shortOfSpace(room);
        const file = await open(`${tmp}.kv`, "w");
        try {
          for (const part of parts) await file.write(part);
        } finally {
          await file.close();
        }
        return await this.finish(base, tmp, fileSize, saved, transcriptJson, expected);
      } catch (error) {
        return await this.abandon(base, tmp, expected, error);
      }
    })();
    this.awaited(base, this.filed(base, written));
  }

  /** Tracks the conversation's files being written until `written` settles: its next write waits for them. */
  private filed(base: string, written: Promise<boolean>): Promise<boolean> {
    this.filing.set(base, written);
    void written.then(() => {
      if (this.filing.get(base) === written) this.filing.delete(base);
    });
    return written;
  }

  /** Checksums the captured state, writes its sidecar and renames both into place. */
  private async finish(base: string, tmp: string, fileSize: number, saved: SavedTranscript, transcriptJson: string, expected: number): Promise<boolean> {
    try {
      const sidecar: Sidecar = { format: FORMAT, kvBytes: fileSize, digest: await digestOf(`${tmp}.kv`, transcriptJson), transcript: saved };
      const json = JSON.stringify(sidecar);
      await writeFile(`${tmp}.json`, json);
      await rename(`${tmp}.kv`, `${base}.kv`);
      await rename(`${tmp}.json`, `${base}.json`);
      this.track(`${base}.kv`, fileSize);
      this.track(`${base}.json`, Buffer.byteLength(json));
      await this.evict();
      // The estimate may have been short (there is none before the first save): the reserve rules.
      const kept = await this.makeRoom(0);
      return this.entries.has(`${base}.kv`) || this.shortOfSpace(kept === true ? `the state's ${fileSize} bytes ate into the reserve` : kept);
    } catch (error) {
      return this.abandon(base, tmp, expected, error);
    }
  }

  /**
   * Whatever failed (most likely the disk filled up), nothing partial stays, and space is given
   * back before a chat needs it.
   */
  private async abandon(base: string, tmp: string, expected: number, error: unknown): Promise<false> {
    await rm(`${tmp}.kv`, { force: true }).catch(() => undefined);
    await rm(`${tmp}.json`, { force: true }).catch(() => undefined);
    await this.remove(base);
    await this.makeRoom(expected).catch(() => undefined);
    this.options.warn("could not save a conversation's KV state; it will be re-evaluated when it returns", error);
    return false;
  }

  private shortOfSpace(why: string): false {
    this.options.warn("a conversation's KV state is not saved: its disk is short of space", new Error(why));
    return false;
  }

  /**
   * The pair's transcript when it is exactly what `write` produced for this conversation and fits
   * the context; throws why not. The state file is hashed only once its recorded size is in
   * bounds, and llama.cpp never sees it unless the digest matches.
   */
  private async verify(base: string, key: string): Promise<Transcript> {
    const { contextSize, maxStateBytes } = this.options;
    const sidecarBytes = (await stat(`${base}.json`)).size;
    if (sidecarBytes > contextSize * SIDECAR_BYTES_PER_TOKEN) throw new Error(`sidecar of ${sidecarBytes} bytes exceeds what ${contextSize} tokens need`);
    const sidecar = JSON.parse(await readFile(`${base}.json`, "utf8")) as Partial<Sidecar>;
    if (sidecar.format !== FORMAT) throw new Error("state written by an older version (no checksum, or another one)");
    const { kvBytes, digest, transcript } = sidecar;
    if (transcript?.key !== key) throw new Error("state belongs to another conversation");
    const count = Array.isArray(transcript.tokens) ? transcript.tokens.length : 0;
    if (count === 0 || count > contextSize) throw new Error(`token count ${count} is not within 1..${contextSize}`);
    if (typeof kvBytes !== "number" || kvBytes > maxStateBytes) throw new Error(`recorded state size ${kvBytes} exceeds the bound of ${maxStateBytes} bytes`);
    const actualBytes = (await stat(`${base}.kv`)).size;
    if (actualBytes !== kvBytes) throw new Error(`state file has ${actualBytes} bytes, ${kvBytes} recorded`);
    if ((await digestOf(`${base}.kv`, JSON.stringify(transcript))) !== digest) throw new Error("state file or transcript does not match its checksum");
    return transcriptOf(transcript);
  }

  /**
   * Deletes the conversation's saved state, under every model's directory this store has seen
   * (older models' too); `forgetSaved` reaches those of models loaded beside it.
   */
  async forget(key: string): Promise<void> {
    await this.writing.get(this.pathOf(key));
    const dirs = new Set([this.modelDir, ...[...this.entries.keys()].map(dirname)]);
    for (const dir of dirs) {
      this.options.memory?.drop(join(dir, hash(key)));
      await this.remove(join(dir, hash(key)));
    }
  }

  private pathOf(key: string): string {
    return join(this.modelDir, hash(key));
  }

  private async scan(): Promise<void> {
    for (const model of await readdir(this.options.root)) {
      const dir = join(this.options.root, model);
      for (const name of await readdir(dir).catch(() => [])) {
        const path = join(dir, name);
        // Left by a process that died mid-write.
        if (name.endsWith(".tmp.kv") || name.endsWith(".tmp.json")) {
          await rm(path, { force: true });
          continue;
        }
        const info = await stat(path).catch(() => undefined);
        if (info?.isFile()) this.track(path, info.size, info.mtimeMs);
      }
    }
  }

  private track(path: string, bytes: number, usedAt = Date.now()): void {
    this.total += bytes - (this.entries.get(path)?.bytes ?? 0);
    this.entries.set(path, { bytes, usedAt });
  }

  private touch(path: string, usedAt: number): void {
    const entry = this.entries.get(path);
    if (entry) entry.usedAt = usedAt;
  }

  private async remove(base: string): Promise<void> {
    for (const path of [`${base}.kv`, `${base}.json`]) {
      this.total -= this.entries.get(path)?.bytes ?? 0;
      this.entries.delete(path);
      await rm(path, { force: true }).catch(() => undefined);
    }
  }

  /** Deletes least recently used pairs until the total fits the budget. */
  private async evict(): Promise<void> {
    await this.evictUntil(() => this.total <= this.options.maxBytes);
  }

  /**
   * Deletes least recently used pairs until `bytes` more can be written while the filesystem keeps
   * its reserve; true then, else what is missing.
   */
  private async makeRoom(bytes: number): Promise<true | string> {
    // Synchronous: a metadata call of microseconds, where the thread pool would queue it behind
    // the file I/O of saves finishing, most of a capture's time, with new batches held.
    const { bavail, bsize, blocks } = statfsSync(this.modelDir);
    const free = bavail * bsize;
    const reserve = Math.max(RESERVE_MIN_BYTES, RESERVE_FRACTION * blocks * bsize);
    const target = this.total - (reserve + bytes - free);
    if (await this.evictUntil(() => this.total <= target)) return true;
    return `${free} bytes free with ${this.total} of them cached; ${Math.round(bytes)} needed above a reserve of ${reserve}`;
  }

  private async evictUntil(done: () => boolean): Promise<boolean> {
    const oldest = [...this.entries].filter(([path]) => path.endsWith(".kv")).sort((a, b) => a[1].usedAt - b[1].usedAt);
    for (const [path] of oldest) {
      if (done()) return true;
      await this.remove(path.slice(0, -".kv".length));
    }
    return done();
  }
}

const transcriptOf = ({ key, text, tokens, opens }: SavedTranscript): Transcript => ({
  key,
  text: LlamaText.fromJSON(text),
  tokens,
  ...(opens ? { opens } : {}),
});

/** Loads a verified state (`read`: from its file or from memory); on failure the sequence is left empty. */
async function load(sequence: LlamaContextSequence, transcript: Transcript, read: () => Promise<void>): Promise<void> {
  try {
    // Emptied first: a load that fails leaves the cells untouched while node-llama-cpp already
    // considers the sequence empty, and the next decode would fail.
    await sequence.clearHistory();
    await read();
    // The state holds a prefix of the transcript's tokens (all but an unevaluated last one).
    const held = sequence.contextTokens;
    if (held.length === 0 || held.length > transcript.tokens.length || held.some((token, i) => token !== transcript.tokens[i])) {
      throw new Error("the state does not hold its transcript's tokens");
    }
  } catch (error) {
    await sequence.clearHistory().catch(() => undefined);
    throw error;
  }
}

/** Chunks of a fixed size: each chunk's hash seeds the next one's, so the boundaries must not move. */
const DIGEST_CHUNK_BYTES = 4 * 2 ** 20;

/**
 * A 64-bit xxHash3 chained over the state file's chunks, then the transcript: random damage goes
 * unnoticed once in 2^64, at memory speed.
 */
async function digestOf(kvPath: string, transcriptJson: string): Promise<string> {
  const file = await open(kvPath);
  try {
    const chunk = Buffer.allocUnsafe(DIGEST_CHUNK_BYTES);
    let digest = 0n;
    for (let position = 0; ; ) {
      const { bytesRead } = await file.read(chunk, 0, chunk.length, position);
      if (bytesRead === 0) break;
      digest = Bun.hash.xxHash3(chunk.subarray(0, bytesRead), digest);
      position += bytesRead;
    }
    return Bun.hash.xxHash3(transcriptJson, digest).toString(16);
  } finally {
    await file.close();
  }
}

/**
 * The largest state file a sequence of `context` can write, so that a damaged size is refused
 * before the file is even read. A state holds at most `contextSize` cells: per cell its K and V
 * rows in every layer, plus metadata (token, position, sequence id count and id: 16 bytes, twice
 * for models with a sliding-window cache), plus a few headers per layer. The demo model measures
 * exactly 56 + 1040·n bytes for n tokens: 1 layer × 4 KV heads × (64 + 64) dims × 2 bytes (f16)
 * = 1024 bytes of K and V per cell, plus 16 of metadata.
 *
 * llama.cpp's own figure for a one-sequence context of `contextSize` cells (node-llama-cpp
 * simulates the allocation, or estimates it, whatever the architecture: sliding windows, recurrent
 * layers, shared KV) covers the K and V data of every cell a state can hold; the metadata and
 * headers are added on top. The compute buffers the figure also counts make the bound loose for
 * the demo model, whose KV is tiny (5.4 MB against a full state's 1.06 MB at 1024 tokens, 11.7
 * against 4.26 MB at 4096): it is a sanity bound, the digest is what proves a file intact.
 */
export async function stateSizeBound(model: LlamaModel, context: LlamaContext): Promise<number> {
  const { cpuRam, gpuVram } = await model.fileInsights.estimateContextResourceRequirementsV2({
    contextSize: context.contextSize,
    modelGpuLayers: 0,
    sequences: 1,
    flashAttention: context.flashAttention,
    kvCacheKeyType: context.kvCacheKeyType,
    kvCacheValueType: context.kvCacheValueType,
  });
  return cpuRam + gpuVram + context.contextSize * 32 + 64 * 1024;
}
