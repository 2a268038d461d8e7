import { Database } from "bun:sqlite";
import { join } from "node:path";
import { type BunSQLiteDatabase, drizzle } from "drizzle-orm/bun-sqlite";
import { BUSY_TIMEOUT_MS, databaseBusy, isBusy } from "./busy";
import { migrate } from "./migrate";
import * as schema from "./schema";

export type Db = BunSQLiteDatabase<typeof schema> & { $client: Database };

/** A transaction of `Db`, as its callback is given it. */
export type Tx = Parameters<Parameters<Db["transaction"]>[0]>[0];

// Also right inside the single executable: there this module's directory is /$bunfs/root, and the
// build embeds the folder as /$bunfs/root/migrations (src/build/build.ts).
const MIGRATIONS_DIR = join(import.meta.dir, "migrations");
/**
 * Opening may wait this long for another process's lock (several opening a new file at once, one
 * migrating): nothing is being served yet, and on a loaded machine a few seconds were not always enough.
 */
const OPENING_BUSY_TIMEOUT_MS = 15_000;

/**
 * Opens (creating if needed) and migrates the database file, in an existing directory. `synchronous = FULL` because a
 * stored conversation matters more than the fsync per commit, which is negligible next to
 * generating a reply; WAL lets listings read while a reply is being written.
 */
export function openDatabase(path: string): Db {
  const sqlite = new Database(path, { create: true, strict: true });
  try {
    // First: switching a new file to WAL takes a lock that another process opening it may hold.
    sqlite.exec(`PRAGMA busy_timeout = ${OPENING_BUSY_TIMEOUT_MS}`);
    sqlite.exec("PRAGMA journal_mode = WAL");
    sqlite.exec("PRAGMA synchronous = FULL");
    sqlite.exec("PRAGMA foreign_keys = ON");
    migrate(sqlite, MIGRATIONS_DIR);
  } catch (error) {
    sqlite.close();
    throw isBusy(error) ? databaseBusy() : error;
  }
  // From here on a wait for the lock happens in `whileBusy`, off the event loop (busy.ts).
  sqlite.exec(`PRAGMA busy_timeout = ${BUSY_TIMEOUT_MS}`);
  return drizzle({ client: sqlite, schema });
}
