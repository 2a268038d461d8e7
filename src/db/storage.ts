/**
 * What the rest of Parley may ask of its database. Every call is async, so a backend with a network
 * round trip (PostgreSQL) can stand where SQLite does; nothing here knows of chats or HTTP.
 */
import type {
  ChainLink,
  ConversationPage,
  ConversationQuery,
  ConversationRef,
  ConversationRow,
  CreatedKey,
  FoundConversation,
  KeyListing,
  KeyRole,
  MessagePage,
  MessageQuery,
  MessageRecord,
  NewMessage,
  NewResponse,
  Principal,
  QuotaPeriod,
  ResponseEnd,
  ResponseEvent,
  ResponseRecord,
  RowQuery,
  StoredConversation,
  StoredTurn,
} from "./types";

export interface KeyStore {
  /** Creates the user if needed and a key for it (a random one unless given). */
  create(userName: string, role: KeyRole, key?: string): Promise<CreatedKey>;
  list(): Promise<KeyListing[]>;
  /** False when no such key exists; revoking twice keeps the first time. */
  revoke(id: number): Promise<boolean>;
  /**
   * The key's principal, or undefined for an unknown or revoked key. Implementations look the key
   * up by its digest (`hashKey`), so the time taken cannot depend on how much of a guess was right,
   * and record its use (`isLastUsedStale`).
   */
  verify(key: string): Promise<Principal | undefined>;
  /**
   * First start: with no keys at all, creates user "admin" with an admin key (the given one, or a
   * random one) and returns it, so the caller can show it once; otherwise undefined.
   */
  bootstrap(adminKey?: string): Promise<string | undefined>;
}

export interface ConversationStore {
  /** The user's conversation with this client id, created on first use (with this metadata). */
  findOrCreate(userId: number, externalId: string, metadata?: Record<string, string>): Promise<FoundConversation>;
  /** The user's conversation with this client id, if there is one. */
  find(userId: number, externalId: string): Promise<StoredConversation | undefined>;
  /** Replaces the metadata of the user's conversation; undefined when there is none. */
  setMetadata(userId: number, externalId: string, metadata: Record<string, string>): Promise<StoredConversation | undefined>;
  addMessage(conversation: ConversationRef, message: NewMessage): Promise<MessageRecord>;
  /** Stores the messages in order, all or none. */
  addMessages(conversation: ConversationRef, messages: readonly NewMessage[]): Promise<MessageRecord[]>;
  /**
   * Up to `limit` of the conversation's rows in `order` (by time, then insertion), from the one
   * whose item id is `from`; undefined when no row has that id.
   */
  rows(conversationId: number, query: RowQuery): Promise<ConversationRow[] | undefined>;
  /** The conversation's row with this item id. */
  row(conversationId: number, itemId: string): Promise<ConversationRow | undefined>;
  /** Deletes the row with this item id (`reasoningOnly`: only its thought); false when there is none. */
  deleteRow(conversationId: number, itemId: string, reasoningOnly: boolean): Promise<boolean>;
  /**
   * The conversation's newest turns, oldest first (ties in time by insertion order): read newest
   * first, up to and including the turn that brings their content to `maxChars` characters (string
   * length), so the work does not grow with the conversation. All turns when they hold fewer.
   */
  recentTurns(conversationId: number, bound: { maxChars: number }): Promise<StoredTurn[]>;
  /** One page of a user's conversations, most recent activity first, and how many there are. */
  list(query: ConversationQuery): Promise<ConversationPage>;
  /**
   * Deletes the user's conversation, its messages and its message count in one transaction (the
   * user's count drops by as many). Returns what was deleted, undefined when the user has no
   * conversation by that id. The id may then be used again: it starts a new conversation.
   */
  delete(userId: number, externalId: string): Promise<ConversationRef | undefined>;
}

export interface MessageStore {
  /** One page of a user's messages and how many the query matches in all. */
  list(query: MessageQuery): Promise<MessagePage>;
}

/** Responses kept for OpenAI's Responses API: each its own row, chained to the one it continues. */
export interface ResponseStore {
  /** Stores it `in_progress`, vouched for `leaseMs` (by the database's clock) unless renewed. */
  create(response: NewResponse, leaseMs: number): Promise<void>;
  /** Vouches for these running responses `leaseMs` longer. */
  renew(ids: readonly string[], leaseMs: number): Promise<void>;
  /** Records how a response ended; false when it is no longer there (deleted meanwhile). */
  finish(id: string, end: ResponseEnd): Promise<boolean>;
  /**
   * The user's response by this id; another user's is not found. One still running whose lease
   * ran out (its process died) is read, and from then on kept, as `failed` (`ABANDONED`).
   */
  get(userId: number, id: string): Promise<ResponseRecord | undefined>;
  /**
   * The response and those it continues, oldest first: read newest first, up to and including the
   * one that brings their items' text to `maxChars` characters, so the work does not grow with
   * the chain. A deleted response ends its chain. Empty when the user has no response by this id.
   */
  chain(userId: number, id: string, bound: { maxChars: number }): Promise<ChainLink[]>;
  /** Deletes the user's response (and its events); returns it, undefined when the user has none by this id. */
  delete(userId: number, id: string): Promise<ResponseRecord | undefined>;
  /** Keeps more of a background response's stream; an event already kept (by its `seq`) stays as it was. */
  appendEvents(id: string, events: readonly ResponseEvent[]): Promise<void>;
  /** Up to `limit` of its kept events after `afterSeq`, in order. */
  events(id: string, afterSeq: number, limit: number): Promise<ResponseEvent[]>;
  /** Asks whichever node generates the user's response to stop it; false when there is none. */
  requestCancel(userId: number, id: string): Promise<boolean>;
  cancelRequested(id: string): Promise<boolean>;
  /** Deletes the responses created before `before` (epoch ms) that have ended (or whose lease ran out); returns how many. */
  expire(before: number): Promise<number>;
  /** How many responses are kept, of every user. */
  count(): Promise<number>;
}

/**
 * Turns of one conversation must not interleave. Within one process the chat service's own lock
 * orders them; processes sharing a database also hold a lease on the conversation while a turn
 * runs: a row, not a transaction, so nothing stays open while a model generates, and a lease whose
 * holder died expires.
 */
export interface ConversationLeases {
  /** Takes, or renews, the lease for `owner` for `ttlMs`; false while another owner's lease is unexpired. */
  lease(conversationId: number, owner: string, ttlMs: number): Promise<boolean>;
  /** Gives the lease up if `owner` still holds it. */
  release(conversationId: number, owner: string): Promise<void>;
}

/** Per-key token buckets that every process sharing the database draws from. */
export interface TokenBuckets {
  /**
   * Refills the key's bucket (at most `capacity` tokens, `perMs` per millisecond since its last
   * use; a new bucket is full) and takes one token if a whole one is there.
   */
  take(keyId: number, capacity: number, perMs: number): Promise<{ taken: boolean; tokens: number }>;
}

/** Per-key counts of open streams that every process sharing the database counts against. */
export interface StreamSlots {
  /** Takes one of the key's `max` slots for `holder`, held `ttlMs` unless renewed; false while all are held. */
  take(keyId: number, holder: string, max: number, ttlMs: number): Promise<boolean>;
  /** Holds these holders' slots `ttlMs` longer: the slots of a process that died run out. */
  renew(holders: readonly string[], ttlMs: number): Promise<void>;
  release(holder: string): Promise<void>;
}

/** Tokens a user's replies used on one UTC day (`YYYY-MM-DD`). */
export interface UsageDay {
  day: string;
  promptTokens: number;
  completionTokens: number;
}

export interface UsageStore {
  /** Adds a reply's tokens to its user's `day`. */
  add(userId: number, day: string, promptTokens: number, completionTokens: number): Promise<void>;
  /** The user's days from `since` on (inclusive), oldest first; days without replies are absent. */
  days(userId: number, since: string): Promise<UsageDay[]>;
}

/** Tokens (prompt and completion) a user's replies may use per period. */
export interface QuotaRule {
  tokens: number;
  period: QuotaPeriod;
}

/** A configured quota: a user's own, or the default (`userId` null) for every user without one. */
export interface QuotaEntry extends QuotaRule {
  userId: number | null;
  /** The user's name; null for the default. */
  user: string | null;
}

/** A user's period so far: tokens their replies used, and tokens held for replies still generating. */
export interface QuotaStanding {
  used: number;
  held: number;
}

/** Asked of `QuotaStore.hold`: at least `need` tokens of `limit` left, or nothing; at most `want`. */
export interface HoldRequest {
  userId: number;
  /** The period's first day: usage from it on counts, and only holds made for it. */
  since: string;
  limit: number;
  need: number;
  want: number;
  /** Names the hold: settled or released by it. */
  holder: string;
  /** A hold never settled (its node died) stops counting then. */
  expiresAt: number;
}

export interface QuotaStore {
  /** Sets the user's quota, or the default with `userId` null. */
  set(userId: number | null, rule: QuotaRule): Promise<void>;
  /** False when there was none. */
  clear(userId: number | null): Promise<boolean>;
  /** The default first, then users' quotas by user id. */
  list(): Promise<QuotaEntry[]>;
  /** The user's own quota, else the default; undefined: no limit. */
  ruleFor(userId: number): Promise<QuotaRule | undefined>;
  standing(userId: number, since: string, now: number): Promise<QuotaStanding>;
  /**
   * At once for every node: when used and held tokens leave at least `need` of the limit, holds
   * what is left up to `want` and returns it; else holds nothing and returns 0. With the standing
   * it saw, this hold included.
   */
  hold(request: HoldRequest, now: number): Promise<QuotaStanding & { granted: number }>;
  /** Adds a reply's tokens to its user's day and ends its hold, in one transaction. */
  settle(holder: string, userId: number, day: string, promptTokens: number, completionTokens: number): Promise<void>;
  /** Ends a hold whose reply never ran. */
  release(holder: string): Promise<void>;
}

export interface Storage extends AsyncDisposable {
  readonly keys: KeyStore;
  readonly conversations: ConversationStore;
  readonly messages: MessageStore;
  readonly responses: ResponseStore;
  readonly usage: UsageStore;
  readonly quotas: QuotaStore;
  /**
   * Only storage that several processes share (PostgreSQL) has these; a single process (SQLite)
   * serializes turns with its own lock and keeps rate-limit buckets in memory.
   */
  readonly leases?: ConversationLeases;
  readonly buckets?: TokenBuckets;
  readonly streams?: StreamSlots;
  /** Resolves when the database answers now; rejects (`Overloaded`) while it cannot be reached. */
  ping(): Promise<void>;
  /** Releases the database; calling it again does nothing. */
  close(): Promise<void>;
}

export interface OpenOptions {
  /**
   * The caller serves from this database: no other process may at the same time, and opening
   * throws `DatabaseInUse` if one does. Commands beside a server (`parley keys`) leave it unset.
   */
  serving?: boolean;
}

/** Another process serves from the database; the message names it. */
export class DatabaseInUse extends Error {}
