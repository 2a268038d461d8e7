/**
 * The migration that renames stored items' types from the Responses API's words to the chat
 * layer's, on every backend: a conversation's rows and a kept response's items written as a
 * database from before it holds them read back, once it has run, as they are written now.
 */
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { readMigrationFiles } from "drizzle-orm/migrator";
import type { ConversationItem, NewResponse } from "../../src/db/types";
import { backends } from "../support";

const FOLDERS = { sqlite: "../../src/db/sqlite/migrations", postgres: "../../src/db/pg/pg-migrations" } as const;

/** The migration's statements; its place in the folder is its tag's number. */
function migration(backend: keyof typeof FOLDERS): string[] {
  const folder = join(import.meta.dir, FOLDERS[backend]);
  const journal = (require(join(folder, "meta/_journal.json")) as { entries: { idx: number; tag: string }[] }).entries;
  const { idx } = journal.find((entry) => entry.tag.endsWith("_item_vocabulary"))!;
  return readMigrationFiles({ migrationsFolder: folder })[idx]!.sql;
}

/** The old words, as a database from before the migration holds them. */
const OLD = { thought: "reasoning", toolCall: "function_call", toolResult: "function_call_output" } as const;

const items: ConversationItem[] = [
  { type: "message", id: "msg_a", role: "user", text: 'a text that says "toolCall" is left as it is' },
  { type: "thought", id: "rs_b", text: "think" },
  { type: "toolCall", id: "fc_b_0", callId: "call_1", name: "f", arguments: '{"x":1}' },
  { type: "toolResult", id: "fco_c", callId: "call_1", output: "21" },
  { type: "message", id: "msg_b", role: "assistant", text: "done" },
];

for (const backend of backends()) {
  describe.skipIf(backend.missing !== undefined)(`on ${backend.name}`, () => {
    test("rows and kept responses written in the old words read back in the new ones", async () => {
      const { storage, query } = await backend.open("item-vocabulary");
      const { userId } = await storage.keys.create("alice", "user");
      const conversation = await storage.conversations.findOrCreate(userId, "kept");
      await storage.conversations.addMessages(conversation, [
        { role: "assistant", content: "think", itemId: "rs_b", item: { type: "thought" } },
        { role: "assistant", content: "", itemId: "fc_b_0", item: { type: "toolCall", callId: "call_1", name: "f", arguments: "{}" } },
        { role: "user", content: "21", itemId: "fco_c", item: { type: "toolResult", callId: "call_1" } },
        { role: "user", content: "a question", itemId: "msg_q" },
      ]);
      const response: NewResponse = {
        id: "resp_1",
        userId,
        previousResponseId: null,
        chainKey: "resp_1",
        conversationId: null,
        model: "m",
        createdAt: 1_700_000_000_000,
        params: {},
        input: items.slice(0, 4),
        background: false,
      };
      await storage.responses.create(response, 60_000);
      await storage.responses.finish("resp_1", { status: "completed", output: items.slice(1), usage: null, finishReason: "stop", error: null });
      const rowsBefore = await storage.conversations.rows(conversation.id, { order: "asc", limit: 10 });
      const before = await storage.responses.get(userId, "resp_1");

      const [text, json] = backend.name === "postgres" ? ["::text", "::jsonb"] : ["", ""];
      for (const [now, old] of Object.entries(OLD)) {
        for (const column of ["input", "output"]) {
          await query(`UPDATE responses SET ${column} = replace(${column}${text}, '"type":"${now}"', '"type":"${old}"')${json}`);
          await query(`UPDATE responses SET ${column} = replace(${column}${text}, '"type": "${now}"', '"type": "${old}"')${json}`);
        }
        await query(`UPDATE messages SET item = replace(item${text}, '"${now}"', '"${old}"')${json} WHERE item IS NOT NULL`);
      }
      const old = JSON.stringify(await query("SELECT input, output FROM responses"));
      expect(old).toContain("function_call_output");
      expect(old).not.toContain("toolResult");

      for (const statement of migration(backend.name)) await query(statement);
      expect(await storage.conversations.rows(conversation.id, { order: "asc", limit: 10 })).toEqual(rowsBefore!);
      expect(await storage.responses.get(userId, "resp_1")).toEqual(before!);
      await storage.close();
    });
  });
}
