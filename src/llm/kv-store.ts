/**
 * Saved KV states: a conversation whose sequence was handed to another comes back by loading its
 * state file (one read) instead of re-evaluating its whole history, and warm conversations
 * survive a restart. Each conversation has two files under `<dir>/<model id>/`:
 *   `<hash>.kv`   llama.cpp's sequence state (KV cache + the tokens it holds), and
 *   `<hash>.json` the transcript (rendered text + exact tokens) that makes the next turn token-exact.
 * Both are written under temporary names and renamed, so a reader never sees a partial file; a
 * pair that does not match (a crash between the renames) or fails to load is deleted and the
 * caller re-evaluates from the history. The model id covers the file's identity and the llama.cpp
 * build, because loading a state made by another model can crash the process. The total size is
 * kept under a byte budget by deleting the least recently used pairs.
 */
import { createHash, randomUUID } from "node:crypto";
import { mkdir, readdir, readFile, rename, rm, stat, utimes, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { LlamaText, type LlamaContextSequence, type LlamaTextJSON, type Token } from "node-llama-cpp";
import type { Transcript } from "./transcript";

interface Entry {
  bytes: number;
  usedAt: number;
}

interface Sidecar {
  key: string;
  text: LlamaTextJSON;
  tokens: Token[];
}

const hash = (value: string) => createHash("sha256").update(value).digest("hex").slice(0, 32);

export class KvStore {
  /** Files by path (`.kv` and `.json` counted separately), across every model's directory. */
  private readonly entries = new Map<string, Entry>();
  private total = 0;

  private constructor(
    private readonly root: string,
    private readonly modelDir: string,
    private readonly maxBytes: number,
  ) {}

  /**
   * Opens the store for one model. `identity` must change whenever a state could not be loaded
   * safely: model file, llama.cpp build, context settings.
   */
  static async open(root: string, identity: string, maxBytes: number): Promise<KvStore> {
    const store = new KvStore(root, join(root, hash(identity)), maxBytes);
    await mkdir(store.modelDir, { recursive: true });
    await store.scan();
    await store.evict();
    return store;
  }

  /** Bytes currently on disk. */
  get size(): number {
    return this.total;
  }

  async save(sequence: LlamaContextSequence, transcript: Transcript): Promise<void> {
    const base = this.pathOf(transcript.key);
    const tmp = `${base}.${randomUUID()}.tmp`;
    const sidecar: Sidecar = { key: transcript.key, text: transcript.text.toJSON(), tokens: [...transcript.tokens] };
    try {
      const { fileSize } = await sequence.saveStateToFile(`${tmp}.kv`);
      const json = JSON.stringify(sidecar);
      await writeFile(`${tmp}.json`, json);
      await rename(`${tmp}.kv`, `${base}.kv`);
      await rename(`${tmp}.json`, `${base}.json`);
      this.track(`${base}.kv`, fileSize);
      this.track(`${base}.json`, Buffer.byteLength(json));
    } finally {
      await rm(`${tmp}.kv`, { force: true });
      await rm(`${tmp}.json`, { force: true });
    }
    await this.evict();
  }

  /**
   * Loads the conversation's saved state into `sequence` and returns its transcript, or undefined
   * (the sequence then holds nothing) when there is no usable state.
   */
  async restore(sequence: LlamaContextSequence, key: string): Promise<Transcript | undefined> {
    const base = this.pathOf(key);
    if (!this.entries.has(`${base}.kv`)) return undefined;
    try {
      const sidecar = JSON.parse(await readFile(`${base}.json`, "utf8")) as Sidecar;
      if (sidecar.key !== key) throw new Error("state file belongs to another conversation");
      // Emptied first: a load that fails (bad magic, short file) leaves the cells untouched while
      // node-llama-cpp already considers the sequence empty, and the next decode would fail.
      await sequence.clearHistory();
      await sequence.loadStateFromFile(`${base}.kv`, { acceptRisk: true });
      // The state must hold a prefix of the transcript's tokens (all but an unevaluated last one).
      const held = sequence.contextTokens;
      if (held.length === 0 || held.length > sidecar.tokens.length || held.some((token, i) => token !== sidecar.tokens[i])) {
        throw new Error("state file does not match its transcript");
      }
      const now = new Date();
      await utimes(`${base}.kv`, now, now);
      this.touch(`${base}.kv`, now.getTime());
      this.touch(`${base}.json`, now.getTime());
      return { key, text: LlamaText.fromJSON(sidecar.text), tokens: sidecar.tokens };
    } catch {
      await sequence.clearHistory();
      await this.remove(base);
      return undefined;
    }
  }

  /** Deletes the conversation's saved state, under every model's directory (older models' too). */
  async forget(key: string): Promise<void> {
    const dirs = new Set([this.modelDir, ...[...this.entries.keys()].map(dirname)]);
    for (const dir of dirs) await this.remove(join(dir, hash(key)));
  }

  private pathOf(key: string): string {
    return join(this.modelDir, hash(key));
  }

  private async scan(): Promise<void> {
    for (const model of await readdir(this.root)) {
      const dir = join(this.root, model);
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
      await rm(path, { force: true });
    }
  }

  /** Deletes least recently used pairs until the total fits the budget. */
  private async evict(): Promise<void> {
    if (this.total <= this.maxBytes) return;
    const oldest = [...this.entries].filter(([path]) => path.endsWith(".kv")).sort((a, b) => a[1].usedAt - b[1].usedAt);
    for (const [path] of oldest) {
      if (this.total <= this.maxBytes) return;
      await this.remove(path.slice(0, -".kv".length));
    }
  }
}
