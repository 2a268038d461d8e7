import type { Database } from "bun:sqlite";
import { type MigrationMeta, readMigrationFiles } from "drizzle-orm/migrator";

/**
 * drizzle's migrator, in a transaction that takes the write lock first. drizzle's own reads the
 * last applied migration outside its (deferred) transaction, so two processes opening a new
 * database at once both applied `0000_init` and one died on "table already exists" or
 * SQLITE_BUSY. Same table and rows as drizzle's, so either migrator can follow the other.
 */
export function migrate(sqlite: Database, migrationsFolder: string): void {
  const migrations = readMigrationFiles({ migrationsFolder });
  // The usual start, with nothing to apply, reads only: `parley keys` beside a server takes no lock here.
  if (pending(sqlite, migrations).length === 0) return;
  sqlite
    .transaction(() => {
      sqlite.run(`CREATE TABLE IF NOT EXISTS "__drizzle_migrations" (id SERIAL PRIMARY KEY, hash text NOT NULL, created_at numeric)`);
      for (const migration of pending(sqlite, migrations)) {
        for (const statement of migration.sql) sqlite.run(statement);
        sqlite.run(`INSERT INTO "__drizzle_migrations" ("hash", "created_at") VALUES (?, ?)`, [migration.hash, migration.folderMillis]);
      }
    })
    .immediate();
}

function pending(sqlite: Database, migrations: MigrationMeta[]): MigrationMeta[] {
  const table = sqlite.query(`SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '__drizzle_migrations'`).get();
  const last = table
    ? (sqlite.query(`SELECT created_at FROM "__drizzle_migrations" ORDER BY created_at DESC LIMIT 1`).values()[0]?.[0] as number | undefined)
    : undefined;
  return migrations.filter((migration) => last === undefined || Number(last) < migration.folderMillis);
}
