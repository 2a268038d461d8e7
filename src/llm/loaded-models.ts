/**
 * The models in memory: loaded on demand, at most `max` at once, the least recently used idle one
 * unloaded to make room, and each unloaded once it has been idle for `keepAliveMs`. A model with
 * replies in hand (held) is never unloaded; a request for another model then waits until one is
 * idle, at most `queueMax` of them at once.
 */
import { Overloaded } from "../errors";
import type { Engine } from "./engine";
import type { ModelEntry } from "./model";
import { abortError } from "./pool";

/** What a loaded model is: it closes to unload. */
export interface LoadedModel {
  close(): Promise<void>;
}

/** A loaded model's engine, held for a request: it stays loaded until `release`. */
export interface Held<M extends LoadedModel> {
  engine: M;
  /** Idempotent. */
  release(): void;
}

export type HeldEngine = Held<Engine>;

export interface LoadedModelsOptions<M extends LoadedModel> {
  /** Models loaded at once. */
  max: number;
  /** How long a model stays loaded once idle: 0 unloads it at once, -1 never. */
  keepAliveMs: number;
  /** Requests that may wait for room to load their model; more are refused (`Overloaded`). */
  queueMax: number;
  load(entry: ModelEntry): Promise<M>;
  onLoaded?(entry: ModelEntry, engine: M, ms: number): void;
  onUnloaded?(entry: ModelEntry): void;
  /** A model that failed to load, or to close. */
  onError?(entry: ModelEntry, error: unknown): void;
}

interface Slot<M> {
  entry: ModelEntry;
  engine: Promise<M>;
  loaded?: M;
  held: number;
  lastUsed: number;
  idle?: Timer;
  /** What the last hold released asked for (see `hold`). */
  keepAliveMs?: number;
}

export class LoadedModels<M extends LoadedModel = Engine> {
  /** By model id; a slot is here from the start of its load until its unload begins. */
  private readonly slots = new Map<string, Slot<M>>();
  /** Unloads under way: their memory is not free yet, so no load starts before they end. */
  private unloading = new Set<Promise<void>>();
  private waiters: (() => void)[] = [];
  private closed = false;

  constructor(private readonly options: LoadedModelsOptions<M>) {}

  /**
   * The model's engine, loaded if need be, held until `release`. Waits while every loaded model is
   * held and there is no room; the signal ends the wait (`AbortError`). `keepAliveMs`: how long the
   * model stays loaded once idle after this hold, as a client asked; never longer than the
   * operator's, and the last hold released decides.
   */
  async hold(entry: ModelEntry, signal?: AbortSignal, keepAliveMs?: number): Promise<Held<M>> {
    for (;;) {
      if (this.closed) throw new Overloaded("the server is shutting down", 5_000);
      const slot = this.slots.get(entry.id) ?? (this.slots.size < this.options.max ? this.startLoad(entry) : undefined);
      if (slot) return this.take(slot, keepAliveMs);
      const idle = this.leastRecentlyUsedIdle();
      if (idle) await this.unload(idle);
      else await this.roomFreed(signal);
    }
  }

  /** The engines loaded now. */
  engines(): M[] {
    return [...this.slots.values()].flatMap((slot) => (slot.loaded ? [slot.loaded] : []));
  }

  /** Requests waiting for room to load their model. */
  get waiting(): number {
    return this.waiters.length;
  }

  /** Whether the model with this id is loaded now. */
  isLoaded(id: string): boolean {
    return this.slots.get(id)?.loaded !== undefined;
  }

  /**
   * When the model with this id unloads unless a request holds it meanwhile, in milliseconds since
   * the epoch (for one held now, its keep-alive from now); Infinity: never. Undefined: not loaded.
   */
  expiresAt(id: string): number | undefined {
    const slot = this.slots.get(id);
    if (slot?.loaded === undefined) return undefined;
    const keepAliveMs = slot.keepAliveMs ?? this.options.keepAliveMs;
    if (keepAliveMs < 0) return Number.POSITIVE_INFINITY;
    const idleSince = slot.held > 0 ? Date.now() : Date.now() - (performance.now() - slot.lastUsed);
    return idleSince + keepAliveMs;
  }

  /** Unloads every model; waiting requests are refused. Call once no reply runs. */
  async close(): Promise<void> {
    this.closed = true;
    this.roomMade();
    await Promise.all([...this.slots.values()].map((slot) => this.unload(slot)));
    await Promise.all(this.unloading);
  }

  private startLoad(entry: ModelEntry): Slot<M> {
    const started = performance.now();
    const slot: Slot<M> = { entry, held: 0, lastUsed: performance.now(), engine: undefined as never };
    slot.engine = (async () => {
      await Promise.all(this.unloading);
      const engine = await this.options.load(entry);
      slot.loaded = engine;
      this.options.onLoaded?.(entry, engine, performance.now() - started);
      return engine;
    })();
    slot.engine.catch((error: unknown) => {
      this.slots.delete(entry.id);
      this.options.onError?.(entry, error);
      this.roomMade();
    });
    this.slots.set(entry.id, slot);
    return slot;
  }

  private async take(slot: Slot<M>, keepAliveMs?: number): Promise<Held<M>> {
    slot.held++;
    clearTimeout(slot.idle);
    let engine: M;
    try {
      engine = await slot.engine;
    } catch (error) {
      slot.held--;
      throw error;
    }
    let released = false;
    return {
      engine,
      release: () => {
        if (released) return;
        released = true;
        this.released(slot, keepAliveMs);
      },
    };
  }

  private released(slot: Slot<M>, asked?: number): void {
    slot.held--;
    slot.lastUsed = performance.now();
    slot.keepAliveMs = asked === undefined ? undefined : boundedKeepAlive(asked, this.options.keepAliveMs);
    // Unloaded meanwhile (closing): nothing is left to time.
    if (slot.held > 0 || this.slots.get(slot.entry.id) !== slot) return;
    this.roomMade();
    const keepAliveMs = slot.keepAliveMs ?? this.options.keepAliveMs;
    if (keepAliveMs === 0) void this.unload(slot);
    // Unreferenced: an idle model's timer never keeps the process alive.
    else if (keepAliveMs > 0) slot.idle = setTimeout(() => void this.unload(slot), keepAliveMs).unref();
  }

  private leastRecentlyUsedIdle(): Slot<M> | undefined {
    let found: Slot<M> | undefined;
    for (const slot of this.slots.values()) if (slot.held === 0 && slot.loaded && (!found || slot.lastUsed < found.lastUsed)) found = slot;
    return found;
  }

  /** Only an idle slot (or every slot at close): taken off first, so no request holds it meanwhile. */
  private async unload(slot: Slot<M>): Promise<void> {
    if (this.slots.get(slot.entry.id) !== slot || (slot.held > 0 && !this.closed)) return;
    clearTimeout(slot.idle);
    this.slots.delete(slot.entry.id);
    const closing = slot.engine.then(
      (engine) => engine.close(),
      () => undefined,
    );
    const done = closing.then(
      () => this.options.onUnloaded?.(slot.entry),
      (error: unknown) => this.options.onError?.(slot.entry, error),
    );
    this.unloading.add(done);
    await done;
    this.unloading.delete(done);
    this.roomMade();
  }

  private roomMade(): void {
    for (const wake of this.waiters.splice(0)) wake();
  }

  /** Until a model is released or unloaded; `Overloaded` when too many wait already. */
  private roomFreed(signal?: AbortSignal): Promise<void> {
    if (this.waiters.length >= this.options.queueMax) throw new Overloaded("too many requests are waiting for a model to be loaded", 2_000);
    if (signal?.aborted) throw abortError(signal);
    return new Promise((resolve, reject) => {
      const wake = () => {
        signal?.removeEventListener("abort", aborted);
        resolve();
      };
      const aborted = () => {
        this.waiters = this.waiters.filter((waiter) => waiter !== wake);
        reject(abortError(signal!));
      };
      signal?.addEventListener("abort", aborted, { once: true });
      this.waiters.push(wake);
    });
  }
}

/** A client's keep-alive within the operator's: never longer (-1, never unloaded, is the longest). */
function boundedKeepAlive(asked: number, operators: number): number {
  if (operators < 0) return asked;
  return asked < 0 ? operators : Math.min(asked, operators);
}
