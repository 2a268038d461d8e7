/** Opening what the configuration names, refusing in one line (exit 2) when it cannot be used. */
import { mkdirSync, statSync } from "node:fs";
import { Refusal } from "./config";
import { describeLocation, isPostgresUrl, openStorage, type StorageOptions } from "./db/open";
import { isDatabaseUnreachable } from "./db/pg/outage";
import { DatabaseInUse, type Storage } from "./db/storage";
import { Overloaded } from "./errors";

const firstLine = (error: unknown) => String((error as Error)?.message ?? error).split("\n")[0];

/**
 * Another server on the file, or another process keeping it locked for seconds: the operator's to
 * fix, but no configuration error (exit 1).
 */
export function refuseBusy(error: unknown): never {
  if (error instanceof DatabaseInUse) throw new Refusal(error.message);
  if (error instanceof Overloaded) throw new Refusal(`cannot start: ${error.message}`);
  throw error;
}

/** How start-up waits for a database server that cannot be reached yet (PostgreSQL). */
export interface DatabaseWait {
  /** Seconds to keep trying, once a second; 0 = not at all. */
  waitS: number;
  announce: (level: "warn", fields: object, msg: string) => void;
}

const RETRY_MS = 1_000;

/**
 * The database `PARLEY_DB` names, opened and migrated. With `wait`, a database server that cannot
 * be reached (not started yet, restarting) is tried again every second for `wait.waitS` seconds,
 * each attempt one line in the log.
 */
export async function openConfiguredStorage(location: string, options: StorageOptions = {}, wait?: DatabaseWait): Promise<Storage> {
  const giveUpAt = Date.now() + (wait?.waitS ?? 0) * 1000;
  for (let attempt = 1; ; attempt++) {
    try {
      return await openStorage(location, options);
    } catch (error) {
      // Only a database server can come up later: a SQLite file that cannot be opened is refused at once.
      if (!isPostgresUrl(location) || !isDatabaseUnreachable(error)) refuseOpening(location, error);
      if (Date.now() + RETRY_MS > giveUpAt) {
        throw new Refusal(
          `the database "${describeLocation(location)}" cannot be reached (${firstLine(error)}); waited ${wait?.waitS ?? 0} s (PARLEY_DB_WAIT_S)`,
        );
      }
      wait!.announce(
        "warn",
        { attempt, reason: firstLine(error), db: describeLocation(location) },
        `the database cannot be reached; trying again in ${RETRY_MS / 1000} s`,
      );
      await Bun.sleep(RETRY_MS);
    }
  }
}

function refuseOpening(location: string, error: unknown): never {
  if (error instanceof DatabaseInUse || error instanceof Overloaded) refuseBusy(error);
  const reason = statSync(location, { throwIfNoEntry: false })?.isDirectory() ? "it is a directory, not a database file" : firstLine(error);
  throw new Refusal(`PARLEY_DB (--db) is "${describeLocation(location)}", which cannot be opened: ${reason}`, 2);
}

/** The data directory `PARLEY_DATA_DIR` names, created if missing. */
export function ensureDataDir(dir: string): void {
  try {
    mkdirSync(dir, { recursive: true });
  } catch (error) {
    throw new Refusal(`PARLEY_DATA_DIR (--data-dir) is "${dir}", which cannot be created: ${firstLine(error)}`, 2);
  }
}
