import { Database } from "bun:sqlite";
import { mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { type BunSQLiteDatabase, drizzle } from "drizzle-orm/bun-sqlite";
import { migrate } from "drizzle-orm/bun-sqlite/migrator";
import * as schema from "./schema";

export type Db = BunSQLiteDatabase<typeof schema> & { $client: Database };

// Also right inside the single executable: there this module's directory is /$bunfs/root, and the
// build embeds the folder as /$bunfs/root/migrations (src/build/build.ts).
const MIGRATIONS_DIR = join(import.meta.dir, "migrations");

/**
 * Opens (creating if needed) and migrates the database file. `synchronous = FULL` because a
 * stored conversation matters more than the fsync per commit, which is negligible next to
 * generating a reply; WAL lets listings read while a reply is being written.
 */
export function openDatabase(path: string): Db {
  if (path !== ":memory:") mkdirSync(dirname(path), { recursive: true });
  const sqlite = new Database(path, { create: true, strict: true });
  sqlite.exec("PRAGMA journal_mode = WAL");
  sqlite.exec("PRAGMA synchronous = FULL");
  sqlite.exec("PRAGMA foreign_keys = ON");
  sqlite.exec("PRAGMA busy_timeout = 5000");
  const db = drizzle({ client: sqlite, schema });
  migrate(db, { migrationsFolder: MIGRATIONS_DIR });
  return db;
}
