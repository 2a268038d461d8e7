/** Opening what the configuration names, refusing in one line (exit 2) when it cannot be used. */
import { mkdirSync, statSync } from "node:fs";
import { Refusal } from "./config";
import { openStorage } from "./db/open";
import type { Storage } from "./db/storage";

const firstLine = (error: unknown) => String((error as Error)?.message ?? error).split("\n")[0];

/** The database `PARLEY_DB` names, opened and migrated. */
export async function openConfiguredStorage(location: string): Promise<Storage> {
  try {
    return await openStorage(location);
  } catch (error) {
    const reason = statSync(location, { throwIfNoEntry: false })?.isDirectory() ? "it is a directory, not a database file" : firstLine(error);
    throw new Refusal(`PARLEY_DB (--db) is "${location}", which cannot be opened: ${reason}`, 2);
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
