import { openPgStorage } from "./pg/storage";
import { openSqliteStorage } from "./sqlite/storage";
import type { OpenOptions, Storage } from "./storage";

const POSTGRES_URL = /^postgres(ql)?:\/\//i;

/** `PARLEY_DB` names PostgreSQL by a `postgres://` or `postgresql://` URL, SQLite by a file path. */
export const isPostgresUrl = (location: string): boolean => POSTGRES_URL.test(location);

/** The location as it may be logged: a URL's password is masked. */
export function describeLocation(location: string): string {
  if (!isPostgresUrl(location)) return location;
  return location.replace(/^([a-z]+:\/\/[^:/@]*):[^@/]*@/i, "$1:***@");
}

export interface StorageOptions extends OpenOptions {
  /** PostgreSQL only: connections this process may hold. */
  poolSize?: number;
  /** PostgreSQL only: each storage call's deadline (src/db/pg/outage.ts). */
  timeoutMs?: number;
}

/** The storage a location names: a PostgreSQL URL, else a SQLite file path. */
export async function openStorage(location: string, options: StorageOptions = {}): Promise<Storage> {
  // Several servers share one PostgreSQL database; `serving` guards only a SQLite file.
  if (isPostgresUrl(location)) return openPgStorage(location, { poolSize: options.poolSize ?? 10, timeoutMs: options.timeoutMs ?? 2_000 });
  return openSqliteStorage(location, options);
}
