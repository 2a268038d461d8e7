import type { Database } from "bun:sqlite";
import type { Storage } from "../storage";
import { type Db, openDatabase } from "./client";
import { SqliteConversationStore } from "./conversations";
import { SqliteKeyStore } from "./keys";
import { SqliteMessageStore } from "./messages";

/** Storage in one SQLite file. `db` and `sqlite` are for SQLite's own tools (tests, benchmarks). */
export class SqliteStorage implements Storage {
  readonly keys: SqliteKeyStore;
  readonly conversations: SqliteConversationStore;
  readonly messages: SqliteMessageStore;
  private closed = false;

  constructor(readonly db: Db) {
    this.keys = new SqliteKeyStore(db);
    this.conversations = new SqliteConversationStore(db);
    this.messages = new SqliteMessageStore(db);
  }

  get sqlite(): Database {
    return this.db.$client;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.sqlite.exec("PRAGMA optimize");
    this.sqlite.close();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}

export const openSqliteStorage = (path: string): SqliteStorage => new SqliteStorage(openDatabase(path));
