import { sql } from "drizzle-orm";
import { index, integer, primaryKey, real, sqliteTable, text, uniqueIndex } from "drizzle-orm/sqlite-core";
// Stored messages are what the engine spoke and heard: its vocabulary, not a copy of it.
import { CONVERSATION_ROLES, FINISH_REASONS } from "../../vocabulary";
import { type ConversationItem, KEY_ROLES, type MessageItem, QUOTA_PERIODS, RESPONSE_STATUSES, type ResponseUsageRecord, type StoredImage } from "../types";

/** Milliseconds since the epoch: the contract's times carry milliseconds. */
const createdAt = () => integer("created_at", { mode: "number" }).notNull().default(sql`(cast(unixepoch('subsec') * 1000 as integer))`);

export const users = sqliteTable("users", {
  id: integer("id").primaryKey({ autoIncrement: true }),
  name: text("name").notNull().unique(),
  createdAt: createdAt(),
});

export const apiKeys = sqliteTable(
  "api_keys",
  {
    id: integer("id").primaryKey({ autoIncrement: true }),
    userId: integer("user_id")
      .notNull()
      .references(() => users.id),
    role: text("role", { enum: KEY_ROLES }).notNull(),
    /** `shownPrefix` of the key (src/db/api-keys.ts), so an operator can tell keys apart; never enough to use. */
    prefix: text("prefix").notNull(),
    /** `hashKey` of the whole key (src/db/api-keys.ts). */
    hash: text("hash").notNull().unique(),
    createdAt: createdAt(),
    lastUsedAt: integer("last_used_at", { mode: "number" }),
    revokedAt: integer("revoked_at", { mode: "number" }),
  },
  (table) => [index("api_keys_user_idx").on(table.userId)],
);

export const conversations = sqliteTable(
  "conversations",
  {
    id: integer("id").primaryKey({ autoIncrement: true }),
    userId: integer("user_id")
      .notNull()
      .references(() => users.id),
    /** The client's `conversation_id`; only unique within one user. */
    externalId: text("external_id").notNull(),
    createdAt: createdAt(),
    /** The Conversations API's metadata: up to 16 strings by key. */
    metadata: text("metadata", { mode: "json" }).$type<Record<string, string>>(),
  },
  (table) => [uniqueIndex("conversations_user_external_idx").on(table.userId, table.externalId)],
);

export const messages = sqliteTable(
  "messages",
  {
    id: integer("id").primaryKey({ autoIncrement: true }),
    userId: integer("user_id")
      .notNull()
      .references(() => users.id),
    conversationId: integer("conversation_id")
      .notNull()
      .references(() => conversations.id),
    role: text("role", { enum: CONVERSATION_ROLES }).notNull(),
    content: text("content").notNull(),
    createdAt: createdAt(),
    /** A reasoning model's thought, apart from its answer; null otherwise. */
    reasoning: text("reasoning"),
    finishReason: text("finish_reason", { enum: FINISH_REASONS }),
    promptTokens: integer("prompt_tokens"),
    completionTokens: integer("completion_tokens"),
    cachedTokens: integer("cached_tokens"),
    temperature: real("temperature"),
    model: text("model"),
    /**
     * The item's id as the Conversations and Responses APIs show it (`msg_…`, `fc_…`); a
     * reasoning model's thought is the item `rs_…` of the same stem.
     */
    itemId: text("item_id").notNull().default(""),
    /**
     * Null for a user or assistant message, the only rows the native API lists and counts; else
     * what else this row is (a system message, a function call or its output) for the APIs that
     * show them and the prompts made of them.
     */
    item: text("item", { mode: "json" }).$type<MessageItem>(),
    /** A user message's pictures; null without. */
    images: text("images", { mode: "json" }).$type<StoredImage[]>(),
  },
  (table) => [
    // Serves "a user's messages by created_at" in either direction with id as tie-break, no sort step.
    // Both listing indexes hold only what the native API lists (partial: `item IS NULL`).
    index("messages_user_created_idx").on(table.userId, table.createdAt, table.id).where(sql`${table.item} IS NULL`),
    // SQLite appends the rowid (= id) to every index entry, so this one serves "a user's messages by id".
    index("messages_user_idx").on(table.userId).where(sql`${table.item} IS NULL`),
    index("messages_conversation_created_idx").on(table.conversationId, table.createdAt, table.id),
    index("messages_conversation_item_idx").on(table.conversationId, table.itemId),
  ],
);

/**
 * Message counts kept by triggers on `messages` (migration 0002), so `total_rows` of a listing is
 * one row read instead of a count over the user's whole history.
 */
export const userMessageCounts = sqliteTable("user_message_counts", {
  userId: integer("user_id")
    .primaryKey()
    .references(() => users.id),
  messageCount: integer("message_count").notNull(),
});

export const conversationMessageCounts = sqliteTable("conversation_message_counts", {
  conversationId: integer("conversation_id")
    .primaryKey()
    .references(() => conversations.id),
  messageCount: integer("message_count").notNull(),
  /**
   * The newest message's `created_at`, kept by the same trigger as the count (migration 0003), so
   * storing a message writes no page it did not write before. No index: a user's conversations
   * are sorted when listed (an index cost each message two more page writes).
   */
  updatedAt: integer("updated_at", { mode: "number" }),
});

/**
 * Responses kept for OpenAI's Responses API. Items are JSON, read and written whole: a response's
 * items are only ever needed together.
 */
export const responses = sqliteTable(
  "responses",
  {
    /** `resp_…` */
    id: text("id").primaryKey(),
    userId: integer("user_id")
      .notNull()
      .references(() => users.id),
    /** No reference: deleting a response leaves those that continue it, their chain ending there. */
    previousId: text("previous_id"),
    chainKey: text("chain_key").notNull(),
    /** The conversation it was answered in: deleting the conversation deletes it. */
    conversationId: integer("conversation_id").references(() => conversations.id, { onDelete: "cascade" }),
    status: text("status", { enum: RESPONSE_STATUSES }).notNull(),
    createdAt: createdAt(),
    model: text("model").notNull(),
    params: text("params", { mode: "json" }).$type<Record<string, unknown>>().notNull(),
    input: text("input", { mode: "json" }).$type<ConversationItem[]>().notNull(),
    output: text("output", { mode: "json" }).$type<ConversationItem[]>().notNull(),
    usage: text("usage", { mode: "json" }).$type<ResponseUsageRecord>(),
    finishReason: text("finish_reason", { enum: FINISH_REASONS }),
    error: text("error"),
    background: integer("background", { mode: "boolean" }).notNull().default(false),
    /**
     * While it runs, until when (epoch ms, the database's clock) the process generating it vouches
     * for it; renewed while it runs. Past it, the process died: the response has failed.
     */
    leaseExpiresAt: integer("lease_expires_at", { mode: "number" }),
    /** Asked to stop (`POST /v1/responses/{id}/cancel`) on a node other than the one generating it. */
    cancelRequested: integer("cancel_requested", { mode: "boolean" }).notNull().default(false),
  },
  (table) => [
    index("responses_user_created_idx").on(table.userId, table.createdAt),
    // Serves deleting a conversation's responses with it.
    index("responses_conversation_idx").on(table.conversationId),
  ],
);

/** A background response's stream, event by event, for replays from any node. */
export const responseEvents = sqliteTable(
  "response_events",
  {
    responseId: text("response_id")
      .notNull()
      .references(() => responses.id, { onDelete: "cascade" }),
    seq: integer("seq").notNull(),
    type: text("type").notNull(),
    text: text("text").notNull(),
  },
  (table) => [primaryKey({ columns: [table.responseId, table.seq] })],
);

/**
 * Tokens each user's replies used, by UTC day (`YYYY-MM-DD`): prompt and completion apart, as a
 * reply's `usage` counts them. One row a user and day, added to as replies end.
 */
export const tokenUsage = sqliteTable(
  "token_usage",
  {
    userId: integer("user_id")
      .notNull()
      .references(() => users.id),
    day: text("day").notNull(),
    promptTokens: integer("prompt_tokens").notNull(),
    completionTokens: integer("completion_tokens").notNull(),
  },
  (table) => [primaryKey({ columns: [table.userId, table.day] })],
);

/** Token budgets: user id 0 is the default for every user without one of their own (user ids start at 1). */
export const tokenQuotas = sqliteTable("token_quotas", {
  userId: integer("user_id").primaryKey(),
  tokens: integer("tokens").notNull(),
  period: text("period", { enum: QUOTA_PERIODS }).notNull(),
});

/** Tokens held for replies still generating, so that a user's concurrent replies share the budget. */
export const tokenHolds = sqliteTable(
  "token_holds",
  {
    holder: text("holder").primaryKey(),
    userId: integer("user_id").notNull(),
    since: text("since").notNull(),
    tokens: integer("tokens").notNull(),
    expiresAt: integer("expires_at", { mode: "number" }).notNull(),
  },
  (table) => [index("token_holds_user").on(table.userId, table.since)],
);
