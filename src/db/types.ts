/**
 * The rows storage hands out and takes in, the same for every database. Each dialect's schema
 * builds its enum columns from these lists, so a schema cannot drift from the types.
 */

import type { CONVERSATION_ROLES, FinishReason } from "../vocabulary";

export type { FinishReason };

export const KEY_ROLES = ["user", "admin"] as const;

export type KeyRole = (typeof KEY_ROLES)[number];

export { QUOTA_PERIODS, type QuotaPeriod } from "../vocabulary";
/** Who speaks in a stored conversation (the engine's roles, less the system prompt). */
export type Role = (typeof CONVERSATION_ROLES)[number];

/** Who a request acts as, once its key is verified. */
export interface Principal {
  keyId: number;
  userId: number;
  userName: string;
  role: KeyRole;
}

/** A key just issued: the plaintext is returned this once and never stored. */
export interface CreatedKey {
  key: string;
  id: number;
  userId: number;
}

export interface KeyListing {
  id: number;
  user: string;
  userId: number;
  role: KeyRole;
  prefix: string;
  createdAt: number;
  lastUsedAt: number | null;
  revokedAt: number | null;
}

export interface ConversationRef {
  /** Internal row id. */
  id: number;
  userId: number;
  /** The client's `conversation_id`; only unique within one user. */
  externalId: string;
}

export interface FoundConversation extends ConversationRef {
  /** True when this call created it. */
  created: boolean;
}

/**
 * What a stored row is when it is not a user or assistant message: only the item APIs show it. A
 * system message's, a thought's and a tool's result's text is the row's content.
 */
export type MessageItem =
  | { type: "message"; role: "system" | "developer" }
  | { type: "thought" }
  | { type: "toolCall"; callId: string; name: string; arguments: string }
  | { type: "toolResult"; callId: string }
  /** A server's tools as listed for a turn. */
  | { type: "toolList"; server: string; tools: ListedServerTool[]; error?: string }
  /** A call the service made of a server's tool: its output is the row's content, unless it has its error instead. */
  | { type: "serverCall"; server: string; name: string; arguments: string; error: ServerCallError | null; approvalRequestId?: string }
  | { type: "approvalRequest"; server: string; name: string; arguments: string }
  | { type: "approvalResponse"; approvalRequestId: string; approve: boolean; reason?: string };

/** A picture a user message holds: its file in base64, before the character `at` of the message's text. */
export interface StoredImage {
  at: number;
  base64: string;
}

/** A message to store; the storage fills in its id, owner and conversation. Times are epoch ms. */
export interface NewMessage {
  role: Role;
  content: string;
  /** A user message's pictures. */
  images?: StoredImage[] | null;
  /** A reasoning model's thought, kept apart from its answer (`content`). */
  reasoning?: string | null;
  /** Default: now. */
  createdAt?: number;
  finishReason?: FinishReason | null;
  promptTokens?: number | null;
  completionTokens?: number | null;
  cachedTokens?: number | null;
  temperature?: number | null;
  model?: string | null;
  /** Its id as an item (`msg_…`); default: a new one. */
  itemId?: string;
  /** What it is when not a user or assistant message (then the native API does not list it). */
  item?: MessageItem | null;
}

/** A stored message with its conversation's client-facing id. */
export interface MessageRecord {
  id: number;
  role: Role;
  content: string;
  /** Null for user messages and replies without a thought. */
  reasoning: string | null;
  createdAt: number;
  userId: number;
  finishReason: FinishReason | null;
  /** The model that wrote a reply; null for user messages (and replies stored before models were named). */
  model: string | null;
  /** A user message's pictures; null without. */
  images: StoredImage[] | null;
  conversationId: string;
}

/** One turn of a stored conversation, as the model is given it: with its thought when it has one, and what it is when not a message. */
export interface StoredTurn {
  role: Role;
  content: string;
  reasoning?: string;
  item?: MessageItem;
  images?: StoredImage[];
}

export const storedTurn = (row: {
  role: Role;
  content: string;
  reasoning: string | null;
  item?: MessageItem | null;
  images?: StoredImage[] | null;
}): StoredTurn => ({
  role: row.role,
  content: row.content,
  ...(row.reasoning === null ? {} : { reasoning: row.reasoning }),
  ...(row.item ? { item: row.item } : {}),
  ...(row.images ? { images: row.images } : {}),
});

/** A new message's item id. */
export const newItemId = () => `msg_${crypto.randomUUID().replaceAll("-", "")}`;

/** A conversation as the Conversations API shows it. */
export interface StoredConversation extends ConversationRef {
  createdAt: number;
  metadata: Record<string, string>;
}

/** One stored row of a conversation, whole: what its items are made of. */
export interface ConversationRow extends StoredTurn {
  itemId: string;
  createdAt: number;
}

export interface RowQuery {
  order: "asc" | "desc";
  /** The item id of the first row (inclusive); absent: from the first in `order`. */
  from?: string;
  limit: number;
}

export type SortField = "created_at" | "id";
export type SortDirection = "asc" | "desc";

export interface MessageQuery {
  userId: number;
  conversationId?: string;
  sortField: SortField;
  sortDirection: SortDirection;
  limit: number;
  offset: number;
}

export interface MessagePage {
  rows: MessageRecord[];
  /** Every message the query matches, not only this page's. */
  total: number;
}

/** A conversation as its owner's listing shows it. Times are epoch ms. */
export interface ConversationSummary {
  /** The client's `conversation_id`. */
  conversationId: string;
  createdAt: number;
  /** The newest message's time (the conversation's own when it has none). */
  updatedAt: number;
  messageCount: number;
  /** The first user message, at most `CONVERSATION_TITLE_CHARS` characters (code points); "" if none. */
  title: string;
}

export const CONVERSATION_TITLE_CHARS = 100;

export interface ConversationQuery {
  userId: number;
  limit: number;
  offset: number;
}

export interface ConversationPage {
  /** Most recent activity first; ties by newest conversation. */
  rows: ConversationSummary[];
  /** Every conversation of the user, not only this page's. */
  total: number;
}

/** Where a kept response stands (OpenAI's statuses). */
export const RESPONSE_STATUSES = ["queued", "in_progress", "completed", "incomplete", "cancelled", "failed"] as const;

export type ResponseStatus = (typeof RESPONSE_STATUSES)[number];

/** The roles a message item may have; `developer` is a second system role, kept as its client named it. */
export type ItemRole = "user" | "system" | "developer" | "assistant";

/**
 * One item of a conversation or a kept response, in the chat layer's words: a message, a model's
 * thought, its call of a tool, or a tool's result answering a call. Each protocol that shows items
 * maps these to its own. Stored as JSON: storage keeps them whole and never looks inside.
 */
export type ConversationItem =
  | { type: "message"; id: string; role: ItemRole; text: string; images?: StoredImage[] }
  | { type: "toolCall"; id: string; callId: string; name: string; arguments: string }
  | { type: "toolResult"; id: string; callId: string; output: string }
  | { type: "thought"; id: string; text: string }
  /** A tool server's tools as listed for a response (`error`: why it could not list them). */
  | { type: "toolList"; id: string; server: string; tools: ListedServerTool[]; error?: string }
  /** A call the service made of a server's tool: its output, or why it has none (shown to the model either way). */
  | {
      type: "serverCall";
      id: string;
      server: string;
      name: string;
      arguments: string;
      output: string | null;
      error: ServerCallError | null;
      approvalRequestId?: string;
    }
  /** A call of a server's tool that waits for its client's approval. */
  | { type: "approvalRequest"; id: string; server: string; name: string; arguments: string }
  /** The client's answer to an approval request. */
  | { type: "approvalResponse"; id: string; approvalRequestId: string; approve: boolean; reason?: string };

/** A tool as its server listed it. */
export interface ListedServerTool {
  name: string;
  description?: string;
  inputSchema: Record<string, unknown>;
  annotations?: Record<string, unknown>;
}

/** Why a server's tool call has no output: the tool failed (its content), or the protocol or server did. */
export type ServerCallError = { kind: "tool"; content: unknown; message: string } | { kind: "protocol"; code: number; message: string };

export interface ResponseUsageRecord {
  inputTokens: number;
  outputTokens: number;
  cachedTokens: number;
  /** Of `outputTokens`, the thought's; absent in responses kept before it was counted. */
  reasoningTokens?: number;
}

/** A response to keep, stored as it starts (`in_progress`). Times are epoch ms. */
export interface NewResponse {
  /** `resp_…`, chosen by the caller. */
  id: string;
  userId: number;
  previousResponseId: string | null;
  /** The first response of its chain (or its conversation's key): what its cached state is kept under. */
  chainKey: string;
  /** The conversation (row id) it was answered in, if any: it goes with the conversation. */
  conversationId: number | null;
  model: string;
  createdAt: number;
  /** What the response repeats of its request; storage keeps it as given. */
  params: Record<string, unknown>;
  input: ConversationItem[];
  /** Generated whatever its client does; its stream's events are kept (`ResponseEvent`). */
  background: boolean;
}

/** Why a response whose process died while generating it failed. */
export const ABANDONED = "the server generating this response stopped before it ended";

/** How a kept response ended. */
export interface ResponseEnd {
  status: Exclude<ResponseStatus, "queued" | "in_progress">;
  output: ConversationItem[];
  usage: ResponseUsageRecord | null;
  finishReason: FinishReason | null;
  /** A failed response's reason, as the client may be told it. */
  error: string | null;
}

export interface ResponseRecord extends NewResponse {
  status: ResponseStatus;
  output: ConversationItem[];
  usage: ResponseUsageRecord | null;
  finishReason: FinishReason | null;
  error: string | null;
}

/** One event of a background response's stream, kept as written so any node can replay it. */
export interface ResponseEvent {
  /** Its `sequence_number`: 0, 1, … */
  seq: number;
  /** The event's name (`response.output_text.delta`, …). */
  type: string;
  /** The event as written on the stream. */
  text: string;
}

/** One link of a chain: what a later response's prompt needs of an earlier one. */
export interface ChainLink {
  id: string;
  input: ConversationItem[];
  output: ConversationItem[];
}
