/** Helpers of the reliability suite: contract checks, reading the database. */
import { Database } from "bun:sqlite";
import { HTTP_ERRORS } from "../../src/http/errors";

/** The contract's error codes for each status, from the app's own error table. */
const ERROR_CODES = new Map<number, string[]>();
for (const { status, code } of Object.values(HTTP_ERRORS)) ERROR_CODES.set(status, [...(ERROR_CODES.get(status) ?? []), code]);

/**
 * Reads a response whole and checks it against the contract: a 2xx, or an error body whose
 * code is the one the status stands for. Returns the status and the parsed body.
 */
export async function contractResponse(response: Response): Promise<{ status: number; body: unknown }> {
  const text = await response.text();
  if (response.status >= 200 && response.status < 300) return { status: response.status, body: text };
  let body: { error?: { code?: unknown; request_id?: unknown } };
  try {
    body = JSON.parse(text);
  } catch {
    throw new Error(`status ${response.status} with a body that is not JSON: ${text.slice(0, 200)}`);
  }
  const expected = ERROR_CODES.get(response.status) ?? [];
  if (!expected.includes(String(body.error?.code)) || typeof body.error?.request_id !== "string") {
    throw new Error(`status ${response.status} with body ${text.slice(0, 300)}`);
  }
  return { status: response.status, body };
}

export function withDb<T>(path: string, read: (db: Database) => T): T {
  const db = new Database(path, { readonly: true });
  try {
    return read(db);
  } finally {
    db.close();
  }
}
