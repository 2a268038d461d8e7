/**
 * Saved KV states kept in memory (`PARLEY_KV_RAM_MB`), in front of their files (kv-store.ts): a
 * returning conversation's state is copied back into its sequence at memory speed, and only the
 * states that do not fit here are written to disk. One budget for every loaded model's store: the
 * least recently used state leaves first, spilled to its own store's disk.
 */

/** A state in memory: its size, and how to write it to disk once it leaves. */
export interface HeldState {
  readonly bytes: number;
  spill(): void;
}

export class StateMemory {
  /** In the order of their last use, the least recent first. */
  private readonly held = new Map<string, HeldState>();
  private total = 0;

  constructor(readonly maxBytes: number) {}

  /** Bytes held. */
  get size(): number {
    return this.total;
  }

  /** Keeps `state` under `key` in place of what was there, and spills the least recently used states beyond the budget. */
  put(key: string, state: HeldState): void {
    this.drop(key);
    this.held.set(key, state);
    this.total += state.bytes;
    for (const [oldest, spilled] of this.held) {
      if (this.total <= this.maxBytes) break;
      this.drop(oldest);
      spilled.spill();
    }
  }

  /** The state under `key`, now the most recently used. */
  get(key: string): HeldState | undefined {
    const state = this.drop(key);
    if (state) this.put(key, state);
    return state;
  }

  /** Forgets the state under `key`, unwritten. */
  drop(key: string): HeldState | undefined {
    const state = this.held.get(key);
    if (state === undefined) return undefined;
    this.held.delete(key);
    this.total -= state.bytes;
    return state;
  }

  /** Spills every state whose key starts with `prefix`: a store's, before its process ends. */
  spillAll(prefix: string): void {
    for (const [key, state] of [...this.held]) {
      if (!key.startsWith(prefix)) continue;
      this.drop(key);
      state.spill();
    }
  }
}
