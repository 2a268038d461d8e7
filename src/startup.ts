/** Opening what the configuration names, refusing in one line (exit 2) when it cannot be used. */
import { mkdirSync, statSync } from "node:fs";
import { Refusal } from "./config";
import { describeLocation, openStorage, type StorageOptions } from "./db/open";
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

/** The database `PARLEY_DB` names, opened and migrated. */
export async function openConfiguredStorage(location: string, options: StorageOptions = {}): Promise<Storage> {
  try {
    return await openStorage(location, options);
  } catch (error) {
    if (error instanceof DatabaseInUse || error instanceof Overloaded) refuseBusy(error);
    const reason = statSync(location, { throwIfNoEntry: false })?.isDirectory() ? "it is a directory, not a database file" : firstLine(error);
    throw new Refusal(`PARLEY_DB (--db) is "${describeLocation(location)}", which cannot be opened: ${reason}`, 2);
  }
}

/** The data directory `PARLEY_DATA_DIR` names, created if missing. */
export function ensureDataDir(dir: string): void {
  try {
    mkdirSync(dir, { recursive: true });
  } catch (error) {
    throw new Refusal(`PARLEY_DATA_DIR (--data-dir) is "${dir}", which cannot be created: ${firstLine(error)}`, 2);
  }
}
