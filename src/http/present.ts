/** Domain values as the API shows them: the shapes are src/http/contract.ts's. */
import type { TurnResult, TurnStart } from "../chat/service";
import type { QuotaState } from "../chat/token-ledger";
import type { ConversationSummary, MessageRecord } from "../db/types";
import type { ChatReply, ChatStart, Conversation, ConversationPage, Message, MessagePage, Pagination, QuotaJson } from "./contract";
import type { FieldNames } from "./field-names";
import { toolCallJson } from "./native-tools";
import { pictureUrl } from "./pictures";

/** A stored message as the listing shows it: with its pictures, each a data URL. */
export function messageJson(message: MessageRecord): Message {
  return { ...echoJson(message), ...(message.images ? { images: message.images.map(({ base64 }) => pictureUrl(base64)) } : {}) };
}

/**
 * A stored message as a chat reply shows it: its pictures counted, not sent back, since the client
 * has just sent them (the listing has them). `finish_reason` belongs to replies only, `reasoning` to
 * a reasoning model's.
 */
function echoJson(message: MessageRecord): Message {
  return {
    id: message.id,
    role: message.role,
    content: message.content,
    ...(message.reasoning !== null ? { reasoning: message.reasoning } : {}),
    created_at: new Date(message.createdAt).toISOString(),
    conversation_id: message.conversationId,
    user_id: message.userId,
    ...(message.role === "assistant" && message.finishReason !== null ? { finish_reason: message.finishReason } : {}),
    ...(message.role === "assistant" && message.model !== null ? { model: message.model } : {}),
    ...(message.images ? { image_count: message.images.length } : {}),
  };
}

interface PageOf {
  current: number;
  rowsPerPage: number;
  totalRows: number;
}

const paginationJson = (page: PageOf): Pagination => ({
  current_page: page.current,
  rows_per_page: page.rowsPerPage,
  total_rows: page.totalRows,
  total_pages: Math.ceil(page.totalRows / page.rowsPerPage),
});

export function pageJson(rows: readonly MessageRecord[], page: PageOf): MessagePage {
  return { data: rows.map(messageJson), pagination: paginationJson(page) };
}

export const conversationJson = (conversation: ConversationSummary): Conversation => ({
  conversation_id: conversation.conversationId,
  title: conversation.title,
  created_at: new Date(conversation.createdAt).toISOString(),
  updated_at: new Date(conversation.updatedAt).toISOString(),
  message_count: conversation.messageCount,
});

export function conversationPageJson(rows: readonly ConversationSummary[], page: PageOf): ConversationPage {
  return { data: rows.map(conversationJson), pagination: paginationJson(page) };
}

export const startJson = (start: TurnStart): ChatStart => ({
  conversation_id: start.conversationId,
  new_conversation: start.newConversation,
  user_message: echoJson(start.userMessage),
  model: start.model,
});

export const resultJson = (result: TurnResult): ChatReply => ({
  conversation_id: result.conversationId,
  new_conversation: result.newConversation,
  message: echoJson(result.message),
  user_message: echoJson(result.userMessage),
  ...(result.serverCalls.length > 0 ? { tool_calls: result.serverCalls.map(toolCallJson) } : {}),
  usage: {
    prompt_tokens: result.usage.promptTokens,
    completion_tokens: result.usage.completionTokens,
    total_tokens: result.usage.promptTokens + result.usage.completionTokens,
    cached_tokens: result.usage.cachedTokens,
  },
  model: result.model,
});

/** A user's budget this period. */
export const quotaJson = (state: QuotaState): QuotaJson => ({
  limit: state.limit,
  period: state.period,
  used: state.used,
  remaining: state.remaining,
  resets_at: new Date(state.resetsAt).toISOString(),
});

/** How the native API spells the domain's fields (field-names.ts). */
export const nativeFields: FieldNames = (field) => {
  switch (field.part) {
    case "history":
      return "message";
    case "image":
      return "images";
    case "format":
      return "response_format";
    case "tokenBias":
      return "logit_bias";
    case "conversation":
      return "conversation_id";
    case "serverTool":
      return `tools[${field.index}]`;
    case "toolChoice":
      return "tool_choice";
    default:
      return undefined;
  }
};
