import type { MessageRecord } from "../db/types";

/** A stored message as the API shows it; `finish_reason` belongs to replies only. */
export function messageJson(message: MessageRecord) {
  return {
    id: message.id,
    role: message.role,
    content: message.content,
    created_at: new Date(message.createdAt).toISOString(),
    conversation_id: message.conversationId,
    user_id: message.userId,
    ...(message.role === "assistant" ? { finish_reason: message.finishReason } : {}),
  };
}

export type MessageJson = ReturnType<typeof messageJson>;
