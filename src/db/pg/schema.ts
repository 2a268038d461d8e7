import { sql } from "drizzle-orm";
import { bigint, boolean, doublePrecision, index, integer, jsonb, pgTable, primaryKey, text, uniqueIndex } from "drizzle-orm/pg-core";
// Stored messages are what the engine spoke and heard: its vocabulary, not a copy of it.
import { CONVERSATION_ROLES, FINISH_REASONS } from "../../vocabulary";
import { type ConversationItem, KEY_ROLES, type MessageItem, QUOTA_PERIODS, RESPONSE_STATUSES, type ResponseUsageRecord, type StoredImage } from "../types";

/**
 * Milliseconds since the epoch, as in SQLite, from the database's clock: several nodes share one
 * database, and their own clocks may disagree by more than the gap between two turns.
 */
export const NOW_MS = sql`(extract(epoch from clock_timestamp()) * 1000)::bigint`;

const epochMs = (name: string) => bigint(name, { mode: "number" });
const createdAt = () => epochMs("created_at").notNull().default(NOW_MS);

export const users = pgTable("users", {
  id: integer("id").primaryKey().generatedByDefaultAsIdentity(),
  name: text("name").notNull().unique(),
  createdAt: createdAt(),
});

export const apiKeys = pgTable(
  "api_keys",
  {
    id: integer("id").primaryKey().generatedByDefaultAsIdentity(),
    userId: integer("user_id")
      .notNull()
      .references(() => users.id),
    role: text("role", { enum: KEY_ROLES }).notNull(),
    /** The first characters of the key, so an operator can tell keys apart; never enough to use. */
    prefix: text("prefix").notNull(),
    /** `hashKey` of the whole key (src/db/api-keys.ts). */
    hash: text("hash").notNull().unique(),
    createdAt: createdAt(),
    lastUsedAt: epochMs("last_used_at"),
    revokedAt: epochMs("revoked_at"),
  },
  (table) => [index("api_keys_user_idx").on(table.userId)],
);

export const conversations = pgTable(
  "conversations",
  {
    id: integer("id").primaryKey().generatedByDefaultAsIdentity(),
    userId: integer("user_id")
      .notNull()
      .references(() => users.id),
    /** The client's `conversation_id`; only unique within one user. */
    externalId: text("external_id").notNull(),
    createdAt: createdAt(),
    /** The Conversations API's metadata: up to 16 strings by key. */
    metadata: jsonb("metadata").$type<Record<string, string>>(),
    /** The turn that may write to this conversation now (`leases.ts`), and until when (epoch ms). */
    leaseOwner: text("lease_owner"),
    leaseExpiresAt: epochMs("lease_expires_at"),
  },
  (table) => [uniqueIndex("conversations_user_external_idx").on(table.userId, table.externalId)],
);

export const messages = pgTable(
  "messages",
  {
    id: bigint("id", { mode: "number" }).primaryKey().generatedByDefaultAsIdentity(),
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
    temperature: doublePrecision("temperature"),
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
    item: jsonb("item").$type<MessageItem>(),
    /** A user message's pictures; null without. */
    images: jsonb("images").$type<StoredImage[]>(),
  },
  (table) => [
    // Serves "a user's messages by created_at" in either direction with id as tie-break, no sort step;
    // a page's ids are read from it alone (an index-only scan) before any row is fetched.
    // Both listing indexes hold only what the native API lists (partial: `item IS NULL`).
    index("messages_user_created_idx").on(table.userId, table.createdAt, table.id).where(sql`${table.item} IS NULL`),
    // Unlike SQLite, PostgreSQL does not append the id to an index by itself.
    index("messages_user_idx").on(table.userId, table.id).where(sql`${table.item} IS NULL`),
    index("messages_conversation_created_idx").on(table.conversationId, table.createdAt, table.id),
    index("messages_conversation_item_idx").on(table.conversationId, table.itemId),
  ],
);

/**
 * Message counts kept by triggers on `messages` (the custom migration after the first), so
 * `total_rows` of a listing is one row read instead of a count over the user's whole history.
 */
export const userMessageCounts = pgTable("user_message_counts", {
  userId: integer("user_id")
    .primaryKey()
    .references(() => users.id),
  messageCount: integer("message_count").notNull(),
});

export const conversationMessageCounts = pgTable("conversation_message_counts", {
  conversationId: integer("conversation_id")
    .primaryKey()
    .references(() => conversations.id),
  messageCount: integer("message_count").notNull(),
  /** The newest message's time, kept by the count trigger (migration 0002). */
  updatedAt: epochMs("updated_at"),
});

/** Responses kept for OpenAI's Responses API; as in SQLite. */
export const responses = pgTable(
  "responses",
  {
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
    params: jsonb("params").$type<Record<string, unknown>>().notNull(),
    input: jsonb("input").$type<ConversationItem[]>().notNull(),
    output: jsonb("output").$type<ConversationItem[]>().notNull(),
    usage: jsonb("usage").$type<ResponseUsageRecord>(),
    finishReason: text("finish_reason", { enum: FINISH_REASONS }),
    error: text("error"),
    background: boolean("background").notNull().default(false),
    /**
     * While it runs, until when (epoch ms, the database's clock) the process generating it vouches
     * for it; renewed while it runs. Past it, the process died: the response has failed.
     */
    leaseExpiresAt: epochMs("lease_expires_at"),
    /** Asked to stop (`POST /v1/responses/{id}/cancel`) on a node other than the one generating it. */
    cancelRequested: boolean("cancel_requested").notNull().default(false),
  },
  (table) => [
    index("responses_user_created_idx").on(table.userId, table.createdAt),
    // Serves deleting a conversation's responses with it.
    index("responses_conversation_idx").on(table.conversationId),
  ],
);

/** A background response's stream, event by event, for replays from any node. */
export const responseEvents = pgTable(
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

/** Tokens each user's replies used, by UTC day; as in SQLite. */
export const tokenUsage = pgTable(
  "token_usage",
  {
    userId: integer("user_id")
      .notNull()
      .references(() => users.id),
    day: text("day").notNull(),
    promptTokens: bigint("prompt_tokens", { mode: "number" }).notNull(),
    completionTokens: bigint("completion_tokens", { mode: "number" }).notNull(),
  },
  (table) => [primaryKey({ columns: [table.userId, table.day] })],
);

/** As in SQLite: user id 0 is the default quota. */
export const tokenQuotas = pgTable("token_quotas", {
  userId: integer("user_id").primaryKey(),
  tokens: bigint("tokens", { mode: "number" }).notNull(),
  period: text("period", { enum: QUOTA_PERIODS }).notNull(),
});

export const tokenHolds = pgTable(
  "token_holds",
  {
    holder: text("holder").primaryKey(),
    userId: integer("user_id").notNull(),
    since: text("since").notNull(),
    tokens: bigint("tokens", { mode: "number" }).notNull(),
    expiresAt: epochMs("expires_at").notNull(),
  },
  (table) => [index("token_holds_user").on(table.userId, table.since)],
);
