import { Database } from "bun:sqlite";
import { DatabaseInUse } from "../storage";
import { isBusy } from "./busy";

/** Long enough to read the holder's pid while it writes it; only ever waited for at start-up. */
const LOCK_BUSY_TIMEOUT_MS = 200;

/**
 * Keeps a second `parley serve` off a database file another one serves. Two servers on one file
 * do not work: the order of a conversation's turns, the rate limits and the KV cache are each
 * one process's memory (a database server shared by several is what PostgreSQL is for).
 *
 * The lock is SQLite's write lock on a small database beside the file (`<db>.lock`), held for as
 * long as the server runs. SQLite takes it as a POSIX record lock, which the kernel releases when
 * the process ends however it ends: a SIGKILL leaves no stale lock, as a pid file would, and no pid
 * can be mistaken for a live one. The holder writes its pid there first, so the refused process
 * can name it. `parley keys` never takes this lock.
 */
export class ServingLock implements Disposable {
  private constructor(private readonly lock: Database) {}

  /** Takes the lock for `dbPath`, or throws `DatabaseInUse` naming the process that holds it. */
  static take(dbPath: string): ServingLock {
    const lock = new Database(`${dbPath}.lock`, { create: true, strict: true });
    try {
      lock.exec(`PRAGMA busy_timeout = ${LOCK_BUSY_TIMEOUT_MS}`);
      begin(lock, dbPath);
      lock.exec("CREATE TABLE IF NOT EXISTS holder (pid INTEGER NOT NULL, since INTEGER NOT NULL)");
      lock.exec("DELETE FROM holder");
      lock.run("INSERT INTO holder (pid, since) VALUES (?, ?)", [process.pid, Date.now()]);
      // Committed, so others can read it; then held again. Should another process start in
      // between, one of the two gets the lock and the other is refused, as ever.
      lock.exec("COMMIT");
      begin(lock, dbPath);
      return new ServingLock(lock);
    } catch (error) {
      lock.close();
      throw error;
    }
  }

  /** Closing the connection ends its transaction, and with it the lock. */
  release(): void {
    this.lock.close();
  }

  [Symbol.dispose](): void {
    this.release();
  }
}

function begin(lock: Database, dbPath: string): void {
  try {
    lock.exec("BEGIN IMMEDIATE");
  } catch (error) {
    if (isBusy(error)) throw new DatabaseInUse(`${holderName(lock)} is serving ${dbPath}`);
    throw error;
  }
}

function holderName(lock: Database): string {
  let pid: number | undefined;
  try {
    pid = (lock.query("SELECT pid FROM holder").get() as { pid: number } | null)?.pid;
  } catch {
    // The holder has not written its pid yet.
  }
  return pid === undefined || pid === process.pid ? "another parley serve" : `another parley serve (pid ${pid})`;
}
