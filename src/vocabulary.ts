/**
 * The domain's words that storage, the engine, the chat service and the wire all use: who speaks
 * in a stored conversation, why a reply ended, a quota's period. Nothing here knows any of those layers.
 */

/** Who speaks in a stored conversation; the engine adds the system prompt itself. */
export const CONVERSATION_ROLES = ["user", "assistant"] as const;

export type ConversationRole = (typeof CONVERSATION_ROLES)[number];

/** Why a reply ended: the model ended it, it hit its token limit, or its client went away. */
export const FINISH_REASONS = ["stop", "length", "cancelled"] as const;

export type FinishReason = (typeof FINISH_REASONS)[number];

/** A token budget's calendar period, in UTC. */
export const QUOTA_PERIODS = ["day", "month"] as const;

export type QuotaPeriod = (typeof QUOTA_PERIODS)[number];
