import type { Storage } from "../storage";
import { PgTokenBuckets } from "./buckets";
import { type Db, openDatabase } from "./client";
import { PgConversationStore } from "./conversations";
import { PgKeyStore } from "./keys";
import { PgConversationLeases } from "./leases";
import { PgMessageStore } from "./messages";
import { OutageGuard } from "./outage";
import { PgQuotaStore } from "./quotas";
import { PgResponseStore } from "./responses";
import { PgStreamSlots } from "./stream-slots";
import { PgUsageStore } from "./usage";

export interface PgOptions {
  /** Connections this process may hold. */
  poolSize: number;
  /** Each storage call's deadline, a retry after a lost connection included (outage.ts). */
  timeoutMs: number;
}

/**
 * Storage in a PostgreSQL database that several Parley processes may share. Every call of its
 * stores runs under the outage guard; `db` is for tests and benchmarks.
 */
export class PgStorage implements Storage {
  readonly keys: PgKeyStore;
  readonly conversations: PgConversationStore;
  readonly messages: PgMessageStore;
  readonly responses: PgResponseStore;
  readonly usage: PgUsageStore;
  readonly quotas: PgQuotaStore;
  readonly leases: PgConversationLeases;
  readonly buckets: PgTokenBuckets;
  readonly streams: PgStreamSlots;
  private readonly guard: OutageGuard;
  private closed = false;

  constructor(
    readonly db: Db,
    timeoutMs: number,
  ) {
    const guard = (this.guard = new OutageGuard(timeoutMs));
    // Repeatable: reads, and writes whose second run changes nothing (a conversation found or
    // created, a key's last use stamped, a lease taken or given up by the same owner).
    this.keys = guard.guard(new PgKeyStore(db), ["list", "verify"]);
    this.conversations = guard.guard(new PgConversationStore(db), ["findOrCreate", "find", "setMetadata", "recentTurns", "list", "rows", "row"]);
    this.messages = guard.guard(new PgMessageStore(db), ["list"]);
    // A response is finished by id with the same end however often, an event kept once by its seq: repeatable too.
    this.responses = guard.guard(new PgResponseStore(db), [
      "get",
      "renew",
      "chain",
      "finish",
      "appendEvents",
      "events",
      "requestCancel",
      "cancelRequested",
      "expire",
      "count",
    ]);
    // Adding is not repeatable: a retried add after a lost answer would count a reply twice.
    this.usage = guard.guard(new PgUsageStore(db), ["days"]);
    // A hold taken twice would hold twice; a settlement twice would count twice.
    this.quotas = guard.guard(new PgQuotaStore(db), ["set", "clear", "list", "ruleFor", "standing", "release"]);
    this.leases = guard.guard(new PgConversationLeases(db), ["lease", "release"]);
    this.buckets = guard.guard(new PgTokenBuckets(db), []);
    this.streams = guard.guard(new PgStreamSlots(db), ["renew", "release"]);
  }

  async ping(): Promise<void> {
    await this.guard.run(() => this.db.$client`SELECT 1`, true);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.db.$client.end({ timeout: 5 });
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}

export const openPgStorage = async (url: string, options: PgOptions): Promise<PgStorage> =>
  new PgStorage(await openDatabase(url, options.poolSize, Math.ceil(options.timeoutMs / 1000)), options.timeoutMs);
