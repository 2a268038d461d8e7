/**
 * The storage backends a suite runs against: SQLite always, PostgreSQL when its binaries are here
 * (always under CI). Parameterize a suite with `for (const backend of backends())` rather than
 * copying it; `describe.skipIf(backend.missing)` prints why a backend is skipped.
 */
import { join } from "node:path";
import { openStorage } from "../../src/db/open";
import type { PgStorage } from "../../src/db/pg/storage";
import type { SqliteStorage } from "../../src/db/sqlite/storage";
import type { Storage } from "../../src/db/storage";
import { tempDir } from "./files";
import { freshPostgresDb, postgresMissing } from "./postgres";

export interface OpenedBackend {
  storage: Storage;
  /** What `PARLEY_DB` would say for it: a file path or a URL. */
  location: string;
  /** Rows of a query on the database itself, for a test's own checks. */
  query(sql: string): Promise<Record<string, unknown>[]>;
}

export interface Backend {
  name: "sqlite" | "postgres";
  /** Why this backend cannot run here; undefined when it can. */
  missing?: string;
  /** A fresh, empty, migrated database. */
  open(label: string): Promise<OpenedBackend>;
}

export const sqliteBackend: Backend = {
  name: "sqlite",
  open: async (label) => {
    const location = join(tempDir(label), "parley.db");
    const storage = await openStorage(location);
    return { storage, location, query: async (sql) => (storage as SqliteStorage).sqlite.query(sql).all() as Record<string, unknown>[] };
  },
};

export const postgresBackend = (): Backend => ({
  name: "postgres",
  missing: postgresMissing(),
  open: async (label) => {
    const location = await freshPostgresDb(label);
    const storage = await openStorage(location, { poolSize: 4 });
    const client = (storage as PgStorage).db.$client;
    return { storage, location, query: async (sql) => [...(await client.unsafe(sql))] as Record<string, unknown>[] };
  },
});

export const backends = (): Backend[] => [sqliteBackend, postgresBackend()];
