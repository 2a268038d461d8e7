/**
 * B6's data: 1,000,000 stored messages, 200,000 of them one user's, written straight into a
 * migrated Parley database once and cached under `.bench/` (rebuilt when the migrations change).
 */
import { Database } from "bun:sqlite";
import { existsSync, readdirSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";
import { openStorage } from "../../src/db/open";

export const HISTORY_USER_KEY = "pk_bench_history_user_0123456789abcdef";
const MIGRATIONS = join(import.meta.dir, "../../src/db/sqlite/migrations");

export interface HistoryShape {
  total: number;
  mine: number;
  perConversation: number;
}

export const FULL_HISTORY: HistoryShape = { total: 1_000_000, mine: 200_000, perConversation: 100 };

export function historyDbPath(dir: string, shape: HistoryShape): string {
  const migrations = readdirSync(MIGRATIONS).filter((f) => f.endsWith(".sql")).length;
  return join(dir, `history-${shape.total}-${shape.mine}-m${migrations}.db`);
}

/** Creates the database unless the cached file exists; returns its path. */
export async function ensureHistoryDb(dir: string, shape: HistoryShape): Promise<string> {
  const path = historyDbPath(dir, shape);
  if (existsSync(path)) return path;
  const tmp = `${path}.tmp`;
  for (const suffix of ["", "-wal", "-shm"]) rmSync(tmp + suffix, { force: true });
  const storage = await openStorage(tmp);
  const others = 4;
  const users = [(await storage.keys.create("bench-user", "user", HISTORY_USER_KEY)).userId];
  for (let i = 0; i < others; i++) users.push((await storage.keys.create(`other-${i}`, "user")).userId);
  await storage.close();

  // Plain SQL in one transaction: a million rows through the app's per-turn path would take an hour.
  const db = new Database(tmp, { strict: true });
  db.exec("PRAGMA journal_mode = WAL; PRAGMA synchronous = OFF");
  const conversation = db.prepare("INSERT INTO conversations (user_id, external_id, created_at) VALUES (?, ?, ?) RETURNING id");
  const message = db.prepare("INSERT INTO messages (user_id, conversation_id, role, content, created_at, finish_reason) VALUES (?, ?, ?, ?, ?, ?)");
  const start = Date.UTC(2026, 0, 1);
  db.transaction(() => {
    let written = 0;
    let conv = 0;
    let convId = 0;
    let owner = 0;
    const otherEach = (shape.total - shape.mine) / others;
    while (written < shape.total) {
      if (written % shape.perConversation === 0) {
        owner = written < shape.mine ? users[0]! : users[1 + Math.floor((written - shape.mine) / otherEach)]!;
        convId = (conversation.get(owner, `conv-${conv++}`, start + written * 1000) as { id: number }).id;
      }
      const user = written % 2 === 0;
      message.run(
        owner,
        convId,
        user ? "user" : "assistant",
        user ? `question ${written} about something` : `answer ${written}, with a few more words than the question`,
        // Interleaved users, strictly increasing times, with a duplicate every so often for tie-breaks.
        start + written * 1000 - (written % 97 === 0 ? 1000 : 0),
        user ? null : "stop",
      );
      written++;
    }
  })();
  db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
  db.close();
  // Reopened through Parley so counters or indexes that later migrations derive are in place.
  await (await openStorage(tmp)).close();
  renameSync(tmp, path);
  for (const suffix of ["-wal", "-shm"]) rmSync(tmp + suffix, { force: true });
  return path;
}
