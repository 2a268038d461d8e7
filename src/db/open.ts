import type { OpenOptions, Storage } from "./storage";
import { openSqliteStorage } from "./sqlite/storage";

/** The storage a location names; today every location is a SQLite file path. */
export async function openStorage(location: string, options: OpenOptions = {}): Promise<Storage> {
  return openSqliteStorage(location, options);
}
