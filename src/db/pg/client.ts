import { join } from "node:path";
import { drizzle, type PostgresJsDatabase } from "drizzle-orm/postgres-js";
import { migrate } from "drizzle-orm/postgres-js/migrator";
import postgres, { type Sql } from "postgres";
import * as schema from "./schema";

export type Db = PostgresJsDatabase<typeof schema> & { $client: Sql };

/** A transaction of `Db`, as its callback is given it. */
export type Tx = Parameters<Parameters<Db["transaction"]>[0]>[0];

// Also right inside the single executable: there this module's directory is /$bunfs/root, and the
// build embeds the folder as /$bunfs/root/pg-migrations (src/build/build.ts).
const MIGRATIONS_DIR = join(import.meta.dir, "pg-migrations");

/** Any constant both nodes agree on: the advisory lock that lets one node at a time migrate. */
const MIGRATION_LOCK = 0x70617231; // "par1"

/**
 * libpq's `?host=/socket/dir` form, which postgres.js does not read from a URL (it would send
 * `host` to the server as a setting): taken out and given as the host option instead. libpq's
 * usual way to write it leaves the URL's host empty (`postgresql://user:pw@/db?host=/run/postgresql`),
 * which the URL parser refuses: a placeholder host stands in, the socket directory replacing it.
 */
function socketHost(url: string): { url: string; host?: string } {
  const parsed = new URL(url.replace(/^(postgres(?:ql)?:\/\/(?:[^@/]*@)?)(?=[/?])/i, "$1localhost"));
  const host = parsed.searchParams.get("host");
  if (host === null) return { url };
  parsed.searchParams.delete("host");
  return { url: parsed.toString(), host };
}

/** A pool of `max` connections, each given up after `connectTimeoutS` seconds of trying to connect. */
function connect(location: string, max: number, connectTimeoutS: number): Sql {
  const { url, host } = socketHost(location);
  return postgres(url, {
    max,
    ...(host === undefined ? {} : { host }),
    connect_timeout: connectTimeoutS,
    // postgres.js counts errored closes across the whole pool and waits up to 20 s before a
    // reconnect (3^n / 100 s): after a failover or a restart had closed every connection, queries
    // waited seconds after the database was back. A second at most keeps recovery prompt.
    backoff: (retries: number) => Math.min(0.025 * 2 ** retries, 1),
    // NOTICEs ("already exists, skipping") are the migrator's chatter, not the operator's business.
    onnotice: () => {},
    connection: { application_name: "parley" },
  });
}

/**
 * Connects a pool of `poolSize` and migrates first. Several nodes may start at once on an empty
 * database: each migrates holding a session advisory lock, on a connection of its own (a session
 * lock taken through a pool may be released on another connection), so the second waits and then
 * finds nothing left to do.
 */
export async function openDatabase(url: string, poolSize: number, connectTimeoutS: number): Promise<Db> {
  const migrator = connect(url, 1, connectTimeoutS);
  try {
    await migrator`SELECT pg_advisory_lock(${MIGRATION_LOCK})`;
    await migrate(drizzle({ client: migrator }), { migrationsFolder: MIGRATIONS_DIR });
    await migrator`SELECT pg_advisory_unlock(${MIGRATION_LOCK})`;
  } finally {
    await migrator.end();
  }
  return drizzle({ client: connect(url, poolSize, connectTimeoutS), schema });
}
