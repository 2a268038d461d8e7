// The browser side of docs/API.md. The bodies' types are the server's own (type-only: nothing
// of the server is bundled into the page).
import type {
  ChatDelta,
  ChatReasoning,
  ChatReply,
  ChatStart,
  ChatToolCall,
  ChatToolCallStart,
  Conversation,
  ConversationPage,
  ErrorBody,
  Message,
  MessagePage,
  UsageReport,
} from "../http/contract";
import type { OpenAiModel, OpenAiModelList } from "../http/openai/contract";

export type { ChatToolCall, ChatToolCallStart, Conversation, ConversationPage, Message, MessagePage, OpenAiModel, UsageReport };

export interface ChatRequest {
  message: string;
  conversation_id: string;
  temperature: number;
  max_tokens: number;
  /** Absent: the service's default model. */
  model?: string;
  /** Pictures, each its file in base64, seen after the message (a model that sees pictures only). */
  images?: string[];
  /** Labels of the operator's MCP servers whose tools the service may call for this turn. */
  tools?: string[];
}

/** What a stream delivers; its `error` event is thrown as an ApiError instead. */
export type StreamEvent =
  | { event: "start"; data: ChatStart }
  | { event: "reasoning"; data: ChatReasoning }
  | { event: "delta"; data: ChatDelta }
  | { event: "tool_call"; data: ChatToolCallStart }
  | { event: "tool_result"; data: ChatToolCall }
  | { event: "done"; data: ChatReply };

/** The contract's error, or the page's own `http` code when a proxy answered instead of Parley. */
type ApiErrorBody = Pick<ErrorBody["error"], "message"> & { code: ErrorBody["error"]["code"] | "http"; request_id?: string };

/** A refusal from the API, carrying what the page shows inline. */
export class ApiError extends Error {
  readonly code: string;
  readonly requestId?: string;

  constructor(
    body: ApiErrorBody,
    /** Absent for a failure reported inside a stream, which began as 200. */
    readonly status?: number,
    readonly retryAfterS?: number,
  ) {
    super(body.message);
    this.code = body.code;
    this.requestId = body.request_id;
  }
}

const API = "/api/v1.0";

async function failure(response: Response): Promise<ApiError> {
  const retry = Number(response.headers.get("retry-after") ?? Number.NaN);
  const retryAfterS = Number.isFinite(retry) ? retry : undefined;
  try {
    const { error } = (await response.json()) as ErrorBody;
    return new ApiError(error, response.status, retryAfterS);
  } catch {
    // A proxy in front of Parley may answer with its own non-JSON page.
    return new ApiError({ code: "http", message: `the server answered ${response.status} ${response.statusText}` }, response.status, retryAfterS);
  }
}

export async function listMessages(key: string, conversationId: string | undefined, page: number, rows: number): Promise<MessagePage> {
  const query = new URLSearchParams({ rows_per_page: String(rows), current_page: String(page), sort_by: "created_at:desc" });
  if (conversationId) query.set("conversation_id", conversationId);
  const response = await fetch(`${API}/chat/messages?${query}`, { headers: { authorization: `Bearer ${key}` } });
  if (!response.ok) throw await failure(response);
  return (await response.json()) as MessagePage;
}

/** The key's conversations, most recent activity first. */
export async function listConversations(key: string, page: number, rows: number): Promise<ConversationPage> {
  const query = new URLSearchParams({ rows_per_page: String(rows), current_page: String(page) });
  const response = await fetch(`${API}/chat/conversations?${query}`, { headers: { authorization: `Bearer ${key}` } });
  if (!response.ok) throw await failure(response);
  return (await response.json()) as ConversationPage;
}

/** The models the service has, the default first. */
export async function listModels(key: string): Promise<OpenAiModel[]> {
  const response = await fetch("/v1/models", { headers: { authorization: `Bearer ${key}` } });
  if (!response.ok) throw await failure(response);
  return ((await response.json()) as OpenAiModelList).data;
}

/** The key's user's token budget this period (null: no quota) and usage. */
export async function readUsage(key: string): Promise<UsageReport> {
  const response = await fetch(`${API}/usage`, { headers: { authorization: `Bearer ${key}` } });
  if (!response.ok) throw await failure(response);
  return (await response.json()) as UsageReport;
}

/** Deletes one of the key's conversations; one already gone (404) counts as deleted. */
export async function deleteConversation(key: string, conversationId: string): Promise<void> {
  const response = await fetch(`${API}/chat/conversations/${encodeURIComponent(conversationId)}`, {
    method: "DELETE",
    headers: { authorization: `Bearer ${key}` },
  });
  if (!response.ok && response.status !== 404) throw await failure(response);
}

/**
 * Sends a message with `stream: true` and yields its events as they arrive. `fetch` rather than
 * `EventSource`, which can neither POST nor send the Authorization header. Aborting `signal`
 * closes the connection, which the server takes as "stop" and stores the partial reply.
 */
export async function* streamChat(key: string, request: ChatRequest, signal: AbortSignal): AsyncGenerator<StreamEvent> {
  const response = await fetch(`${API}/chat`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "x-conversation-id": request.conversation_id },
    body: JSON.stringify({ ...request, stream: true }),
    signal,
  });
  if (!response.ok || !response.body) throw await failure(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end: number;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const parsed = parseEvent(buffer.slice(0, end));
      buffer = buffer.slice(end + 2);
      if (parsed?.event === "error") throw new ApiError((parsed.data as ErrorBody).error);
      if (parsed) yield parsed as StreamEvent;
    }
  }
}

/** One SSE block; comment-only blocks (`: ping`) give nothing. */
function parseEvent(block: string): { event: string; data: unknown } | undefined {
  let event = "message";
  let data = "";
  for (const line of block.split("\n")) {
    if (line.startsWith("event:")) event = line.slice(6).trim();
    else if (line.startsWith("data:")) data += line.slice(5).trimStart();
  }
  return data === "" ? undefined : { event, data: JSON.parse(data) };
}
