/**
 * B6's reference: the least a server can do for `GET /api/v1.0/chat/messages` — a bare Bun.serve
 * with bun:sqlite prepared statements, the same key lookup, page query and row count as Parley
 * and the same JSON (Parley's own presenter), and nothing else (no validation, no framework, no
 * logging).
 * Usage: bun baseline-server.ts <db>; prints `{"url": ...}` once listening.
 */
import { Database } from "bun:sqlite";
import { hashKey } from "../../src/db/api-keys";
import type { MessageRecord } from "../../src/db/types";
import { pageJson } from "../../src/http/present";

const db = new Database(Bun.argv[2], { readonly: true, strict: true });
const keyLookup = db.prepare(
  "SELECT k.id AS keyId, u.id AS userId, k.role AS role FROM api_keys k JOIN users u ON u.id = k.user_id WHERE k.hash = ? AND k.revoked_at IS NULL",
);
// Parley's own page query (two steps: the page from the index, then the join), so the comparison
// measures the server around it.
// Only the native API's rows (`item IS NULL`), which the partial `(user_id, created_at, id)` index holds.
const page = db.prepare(
  `SELECT p.id, p.role, p.content, p.reasoning, p.created_at AS createdAt, p.user_id AS userId, p.finish_reason AS finishReason, c.external_id AS conversationId
   FROM (SELECT id, role, content, reasoning, created_at, user_id, finish_reason, conversation_id FROM messages
         WHERE user_id = ? AND item IS NULL ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?) p
   JOIN conversations c ON c.id = p.conversation_id ORDER BY p.created_at DESC, p.id DESC`,
);
const total = db.prepare(
  // The cheapest count the schema allows: the stored per-user counter when there is one.
  db.prepare("SELECT 1 FROM sqlite_master WHERE name = 'user_message_counts'").get()
    ? "SELECT message_count AS n FROM user_message_counts WHERE user_id = ?"
    : "SELECT count(*) AS n FROM messages WHERE user_id = ?",
);

const server = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  fetch(request) {
    const key = request.headers.get("authorization")?.slice(7) ?? "";
    const principal = keyLookup.get(hashKey(key)) as { userId: number } | null;
    if (!principal) return new Response("unauthorized", { status: 401 });
    const url = new URL(request.url);
    const rowsPerPage = Number(url.searchParams.get("rows_per_page") ?? 20);
    const currentPage = Number(url.searchParams.get("current_page") ?? 1);
    const rows = page.all(principal.userId, rowsPerPage, (currentPage - 1) * rowsPerPage) as MessageRecord[];
    const n = (total.get(principal.userId) as { n: number } | null)?.n ?? 0;
    return Response.json(pageJson(rows, { current: currentPage, rowsPerPage, totalRows: n }));
  },
});
console.log(JSON.stringify({ url: `http://127.0.0.1:${server.port}` }));
