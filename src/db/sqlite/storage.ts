import type { Database } from "bun:sqlite";
import { mkdirSync } from "node:fs";
import { dirname } from "node:path";
import type { OpenOptions, Storage } from "../storage";
import { databaseBusy, isBusy, patient } from "./busy";
import { type Db, openDatabase } from "./client";
import { SqliteConversationStore } from "./conversations";
import { SqliteKeyStore } from "./keys";
import { SqliteMessageStore } from "./messages";
import { SqliteQuotaStore } from "./quotas";
import { failAbandoned, SqliteResponseStore } from "./responses";
import { ServingLock } from "./serving-lock";
import { SqliteUsageStore } from "./usage";

/** Storage in one SQLite file. `db` and `sqlite` are for SQLite's own tools (tests, benchmarks). */
export class SqliteStorage implements Storage {
  readonly keys: SqliteKeyStore;
  readonly conversations: SqliteConversationStore;
  readonly messages: SqliteMessageStore;
  readonly responses: SqliteResponseStore;
  readonly usage: SqliteUsageStore;
  readonly quotas: SqliteQuotaStore;
  private closed = false;

  constructor(
    readonly db: Db,
    private readonly servingLock?: ServingLock,
  ) {
    this.keys = patient(new SqliteKeyStore(db));
    this.conversations = patient(new SqliteConversationStore(db));
    this.messages = patient(new SqliteMessageStore(db));
    this.responses = patient(new SqliteResponseStore(db));
    this.usage = patient(new SqliteUsageStore(db));
    this.quotas = patient(new SqliteQuotaStore(db));
  }

  get sqlite(): Database {
    return this.db.$client;
  }

  /** A file in this process: reachable while open. */
  async ping(): Promise<void> {}

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    try {
      this.sqlite.exec("PRAGMA optimize");
    } catch {
      // Only an optimization: it fails with SQLITE_FULL on a full disk, or busy beside a server,
      // and neither may keep the database from being closed.
    }
    try {
      this.sqlite.close();
    } finally {
      this.servingLock?.release();
    }
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}

export function openSqliteStorage(path: string, options: OpenOptions = {}): SqliteStorage {
  if (path !== ":memory:") mkdirSync(dirname(path), { recursive: true });
  // Taken before the database is even migrated: a refused server has touched nothing.
  const lock = options.serving && path !== ":memory:" ? ServingLock.take(path) : undefined;
  try {
    const db = openDatabase(path);
    try {
      if (lock) failAbandoned(db);
    } catch (error) {
      db.$client.close();
      throw isBusy(error) ? databaseBusy() : error;
    }
    return new SqliteStorage(db, lock);
  } catch (error) {
    lock?.release();
    throw error;
  }
}
