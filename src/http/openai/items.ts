/** The items a client sends to the Responses and Conversations APIs, as the chat layer keeps them. */
import { type TSchema, t } from "elysia";
import { type ItemInput, type ItemPageQuery, type ItemReference, storedImages } from "../../chat/items";
import { InvalidInput } from "../../errors";
import type { TurnImage } from "../../llm/engine";
import type { RequestPictures } from "../pictures";
import { checkedArguments } from "./tools";

export const ITEM_RULE =
  'input must be a string or items: messages {role: user, system, developer or assistant, content: a string or [{type: "input_text" or "output_text", text}] (a user\'s also [{type: "input_image", image_url: a data URL, detail?}])}, function_call {call_id, name, arguments}, function_call_output {call_id, output}, reasoning {summary, content}';

const seen = { id: t.Optional(t.String()), status: t.Optional(t.String()) };

/** An input item of the Responses and Conversations APIs. */
export const ITEM = t.Union(
  [
    t.Object({
      type: t.Optional(t.Literal("message")),
      role: t.Union([t.Literal("user"), t.Literal("system"), t.Literal("developer"), t.Literal("assistant")]),
      content: t.Union([
        t.String(),
        t.Array(
          t.Union([
            t.Object({ type: t.Union([t.Literal("input_text"), t.Literal("output_text")]), text: t.String() }),
            // `detail` changes nothing: the model sees a picture at its projector's one resolution.
            t.Object({
              type: t.Literal("input_image"),
              image_url: t.Optional(t.Union([t.String(), t.Null()])),
              file_id: t.Optional(t.Union([t.String(), t.Null()])),
              detail: t.Optional(t.Union([t.Literal("auto"), t.Literal("low"), t.Literal("high")])),
            }),
          ]),
        ),
      ]),
      ...seen,
    }),
    t.Object({ type: t.Literal("function_call"), call_id: t.String({ minLength: 1 }), name: t.String(), arguments: t.String(), ...seen }),
    t.Object({ type: t.Literal("function_call_output"), call_id: t.String(), output: t.String(), ...seen }),
    t.Object({
      type: t.Literal("reasoning"),
      summary: t.Array(t.Unknown()),
      content: t.Optional(t.Array(t.Object({ type: t.Literal("reasoning_text"), text: t.String() }))),
      ...seen,
    }),
  ],
  { error: ITEM_RULE },
);

type Item = typeof ITEM.static;

const nullable = <T extends TSchema>(schema: T) => t.Optional(t.Union([schema, t.Null()]));

/** The items of tools the service runs (MCP servers'): an answer to an approval request, or a response's own, given back. */
const SERVER_ITEMS = [
  t.Object({
    type: t.Literal("mcp_approval_response"),
    approval_request_id: t.String({ minLength: 1 }),
    approve: t.Boolean(),
    reason: nullable(t.String()),
    id: nullable(t.String()),
  }),
  t.Object({ type: t.Literal("mcp_approval_request"), id: t.String({ minLength: 1 }), server_label: t.String(), name: t.String(), arguments: t.String() }),
  t.Object({
    type: t.Literal("mcp_list_tools"),
    id: t.String({ minLength: 1 }),
    server_label: t.String(),
    tools: t.Array(t.Object({ name: t.String(), description: nullable(t.String()), input_schema: t.Unknown(), annotations: t.Optional(t.Unknown()) })),
    error: nullable(t.String()),
  }),
  t.Object({
    type: t.Literal("mcp_call"),
    id: t.String({ minLength: 1 }),
    server_label: t.String(),
    name: t.String(),
    arguments: t.String(),
    output: nullable(t.String()),
    error: t.Optional(t.Unknown()),
    approval_request_id: nullable(t.String()),
    status: t.Optional(t.String()),
  }),
];

/** A Responses request's input item: any item, an MCP server's, or OpenAI's reference to one a kept response holds. */
export const RESPONSE_ITEM = t.Union([...ITEM.anyOf, ...SERVER_ITEMS, t.Object({ type: t.Literal("item_reference"), id: t.String({ minLength: 1 }) })], {
  error: `${ITEM_RULE}, mcp_approval_response {approval_request_id, approve, reason?}, an mcp_list_tools, mcp_call or mcp_approval_request item of a response, or item_reference {id} of an item of a kept response`,
});

export type ServerItemInput = (typeof SERVER_ITEMS)[number]["static"];

/** An MCP server's item as the chat layer keeps it; a call's error is shown to the model by its message. */
export function serverItemOf(entry: ServerItemInput): ItemInput {
  switch (entry.type) {
    case "mcp_approval_response":
      return {
        type: "approvalResponse",
        ...(entry.id != null ? { id: entry.id } : {}),
        approvalRequestId: entry.approval_request_id,
        approve: entry.approve,
        ...(entry.reason != null ? { reason: entry.reason } : {}),
      };
    case "mcp_approval_request":
      return { type: "approvalRequest", id: entry.id, server: entry.server_label, name: entry.name, arguments: entry.arguments };
    case "mcp_list_tools":
      return {
        type: "toolList",
        id: entry.id,
        server: entry.server_label,
        tools: entry.tools.map((tool) => ({
          name: tool.name,
          ...(tool.description != null ? { description: tool.description } : {}),
          inputSchema: (tool.input_schema ?? {}) as Record<string, unknown>,
        })),
        ...(entry.error != null ? { error: entry.error } : {}),
      };
    case "mcp_call":
      return {
        type: "serverCall",
        id: entry.id,
        server: entry.server_label,
        name: entry.name,
        arguments: entry.arguments,
        output: entry.output ?? null,
        error: entry.error == null ? null : { kind: "protocol", code: -32603, message: JSON.stringify(entry.error) },
        ...(entry.approval_request_id != null ? { approvalRequestId: entry.approval_request_id } : {}),
      };
  }
}

/**
 * The request's items as the chat layer keeps them; text checked, a call's arguments a JSON
 * object, its pictures read by the request's `pictures`.
 */
export async function itemsOf(input: string | readonly Item[], pictures: RequestPictures, field = "input"): Promise<ItemInput[]> {
  if (typeof input === "string") return [{ type: "message", role: "user", text: input }];
  const items: ItemInput[] = [];
  for (const [i, entry] of input.entries()) items.push(await itemOf(entry, `${field}[${i}]`, pictures));
  return items;
}

/** A Responses request's input: items, and references to kept ones, which the chat layer resolves in place. */
export async function responseItemsOf(
  input: string | readonly (typeof RESPONSE_ITEM.static)[],
  pictures: RequestPictures,
): Promise<(ItemInput | ItemReference)[]> {
  if (typeof input === "string") return await itemsOf(input, pictures);
  const items: (ItemInput | ItemReference)[] = [];
  for (const [i, entry] of input.entries()) {
    if (entry.type === "item_reference") items.push({ type: "reference", id: entry.id });
    else if (entry.type?.startsWith("mcp_")) items.push(serverItemOf(entry as ServerItemInput));
    else items.push(await itemOf(entry as Item, `input[${i}]`, pictures));
  }
  return items;
}

async function itemOf(entry: Item, at: string, pictures: RequestPictures): Promise<ItemInput> {
  const id = entry.id === undefined ? {} : { id: entry.id };
  switch (entry.type) {
    case "function_call":
      return { type: "toolCall", ...id, callId: entry.call_id, name: entry.name, arguments: checkedArguments(entry.arguments, `${at}.arguments`) };
    case "function_call_output":
      return { type: "toolResult", ...id, callId: entry.call_id, output: entry.output };
    case "reasoning":
      return { type: "thought", ...id, text: (entry.content ?? []).map((part) => part.text).join("") };
    default: {
      const { text, images } = await contentOf(entry, at, pictures);
      if (!text.isWellFormed()) throw new InvalidInput(at, "input must be valid Unicode text (one has a lone surrogate)");
      return { type: "message", ...id, role: entry.role, text, ...storedImages(images) };
    }
  }
}

/** A message's text, its parts' in order, and a user's pictures where their parts stand in it. */
async function contentOf(entry: Extract<Item, { role: string }>, at: string, pictures: RequestPictures): Promise<{ text: string; images: TurnImage[] }> {
  if (typeof entry.content === "string") return { text: entry.content, images: [] };
  let text = "";
  const images: TurnImage[] = [];
  for (const [i, part] of entry.content.entries()) {
    if (part.type !== "input_image") {
      text += part.text;
      continue;
    }
    const where = `${at}.content[${i}]`;
    if (entry.role !== "user") throw new InvalidInput(where, "only a user message may have a picture");
    if (part.image_url == null) throw new InvalidInput(`${where}.file_id`, "Parley keeps no files: send the picture as image_url, a data URL");
    images.push({ data: await pictures.fromUrl(`${where}.image_url`, part.image_url), at: text.length });
  }
  return { text, images };
}

// `include` among them: what it would add, Parley does not have.
export const QUERY_RULE = "unknown query parameter: Parley refuses one it does not know rather than ignore it";

/** A page of items, as OpenAI's lists take it: newest first unless `order=asc`. */
export const ITEM_PAGE_QUERY = t.Object(
  {
    order: t.Optional(t.Union([t.Literal("asc"), t.Literal("desc")], { error: 'order must be "asc" or "desc"' })),
    after: t.Optional(t.String({ error: "after must be an item id" })),
    limit: t.Optional(t.Integer({ minimum: 1, maximum: 100, error: "limit must be an integer from 1 to 100" })),
  },
  { additionalProperties: false, error: QUERY_RULE },
);

export const itemPageOf = (query: typeof ITEM_PAGE_QUERY.static): ItemPageQuery => ({
  order: query.order ?? "desc",
  limit: query.limit ?? 20,
  ...(query.after ? { after: query.after } : {}),
});
