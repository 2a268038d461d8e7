import type { Storage } from "../storage";
import { type Db, openDatabase } from "./client";
import { PgTokenBuckets } from "./buckets";
import { PgConversationStore } from "./conversations";
import { PgKeyStore } from "./keys";
import { PgConversationLeases } from "./leases";
import { PgMessageStore } from "./messages";

/** Storage in a PostgreSQL database that several Parley processes may share. `db` is for tests and benchmarks. */
export class PgStorage implements Storage {
  readonly keys: PgKeyStore;
  readonly conversations: PgConversationStore;
  readonly messages: PgMessageStore;
  readonly leases: PgConversationLeases;
  readonly buckets: PgTokenBuckets;
  private closed = false;

  constructor(readonly db: Db) {
    this.keys = new PgKeyStore(db);
    this.conversations = new PgConversationStore(db);
    this.messages = new PgMessageStore(db);
    this.leases = new PgConversationLeases(db);
    this.buckets = new PgTokenBuckets(db);
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

export const openPgStorage = async (url: string, poolSize: number): Promise<PgStorage> => new PgStorage(await openDatabase(url, poolSize));
