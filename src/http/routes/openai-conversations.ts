/**
 * OpenAI's Conversations API (`/v1/conversations`) over Parley's stored conversations: a
 * conversation's id is its native `conversation_id`, its items are its stored rows (docs/API.md,
 * "Conversations").
 */
import { Elysia, t } from "elysia";
import type { ConversationItemService } from "../../chat/conversation-item-service";
import { isAbort } from "../../errors";
import { requireKey } from "../auth";
import { namingFields } from "../field-names";
import { type BodyLimits, jsonBody } from "../json-body";
import { responseFields } from "../openai/fields";
import { ITEM, ITEM_PAGE_QUERY, itemPageOf, itemsOf, QUERY_RULE } from "../openai/items";
import { conversationJson, inputItemJson, inputItemList } from "../openai/responses-present";
import { jsonResponse, openAiErrorResponses } from "../openapi";
import { RequestPictures } from "../pictures";
import { optional, UNKNOWN_FIELD } from "../sampling-fields";

export interface OpenAiConversationRouteDeps {
  conversationItems: ConversationItemService;
  body: BodyLimits;
}

const TAGS = ["OpenAI-compatible"];
const METADATA = t.Record(t.String({ maxLength: 64 }), t.String({ maxLength: 512 }), { maxProperties: 16 });
const METADATA_RULE = "metadata must map up to 16 keys (at most 64 characters) to strings (at most 512)";
const ITEMS = t.Array(ITEM, { maxItems: 20, error: "items must be an array of at most 20 items" });
const conversationId = t.Object({ id: t.String() });
const itemPath = t.Object({ id: t.String(), item_id: t.String() });
const NOT_FOUND = { "404": { ...openAiErrorResponses("not_found")["404"]!, description: "not_found: the caller has no conversation (or item) by this id" } };
const COMMON = openAiErrorResponses("unauthorized", "rate_limited");

/** A change that waits for the conversation's running turn; a client that leaves meanwhile changes nothing. */
async function unlessLeft<T>(change: Promise<T>): Promise<T | undefined> {
  try {
    return await change;
  } catch (error) {
    if (isAbort(error)) return undefined;
    throw error;
  }
}

export const openAiConversationRoutes = (deps: OpenAiConversationRouteDeps) =>
  new Elysia({ name: "parley/routes/openai-conversations" })
    .onBeforeHandle(namingFields(responseFields))
    .use(requireKey)
    .post(
      "/v1/conversations",
      async ({ body, principal }) =>
        conversationJson(
          await deps.conversationItems.create(
            principal.userId,
            await itemsOf(body?.items ?? [], new RequestPictures(deps.body.pictureHosts), "items"),
            body?.metadata ?? {},
          ),
        ),
      {
        auth: "key",
        parse: jsonBody(deps.body, { pictures: true }),
        body: t.Optional(
          t.Union([
            t.Null(),
            t.Object({ items: optional(ITEMS, "items must be an array of at most 20 items"), metadata: optional(METADATA, METADATA_RULE) }, UNKNOWN_FIELD),
          ]),
        ),
        detail: {
          summary: "Create a conversation, with its first items (a native conversation too)",
          tags: TAGS,
          responses: {
            "200": jsonResponse("The conversation", "ConversationObject"),
            ...openAiErrorResponses("invalid_json", "invalid_input", "unauthorized", "payload_too_large", "unsupported_media_type", "rate_limited"),
          },
        },
      },
    )
    .get("/v1/conversations/:id", async ({ params, principal }) => conversationJson(await deps.conversationItems.get(principal.userId, params.id)), {
      auth: "key",
      params: conversationId,
      detail: { summary: "A conversation", tags: TAGS, responses: { "200": jsonResponse("The conversation", "ConversationObject"), ...COMMON, ...NOT_FOUND } },
    })
    .post(
      "/v1/conversations/:id",
      async ({ body, params, principal }) => conversationJson(await deps.conversationItems.update(principal.userId, params.id, body.metadata ?? {})),
      {
        auth: "key",
        params: conversationId,
        parse: jsonBody(deps.body),
        body: t.Object({ metadata: t.Union([METADATA, t.Null()], { error: METADATA_RULE }) }, UNKNOWN_FIELD),
        detail: {
          summary: "Replace a conversation's metadata",
          tags: TAGS,
          responses: {
            "200": jsonResponse("The conversation", "ConversationObject"),
            ...openAiErrorResponses("invalid_json", "invalid_input", "unauthorized", "rate_limited"),
            ...NOT_FOUND,
          },
        },
      },
    )
    .delete(
      "/v1/conversations/:id",
      async ({ params, principal, request }) => {
        const deleted = await unlessLeft(deps.conversationItems.delete(principal.userId, params.id, request.signal).then(() => true));
        return deleted && { id: params.id, object: "conversation.deleted" as const, deleted: true as const };
      },
      {
        auth: "key",
        params: conversationId,
        detail: {
          summary: "Delete a conversation: its items, messages and cached state (after its running turn)",
          tags: TAGS,
          responses: { "200": jsonResponse("Deleted", "DeletedConversation"), ...COMMON, ...NOT_FOUND },
        },
      },
    )
    .get(
      "/v1/conversations/:id/items",
      async ({ params, principal, query }) => inputItemList(await deps.conversationItems.items(principal.userId, params.id, itemPageOf(query))),
      {
        auth: "key",
        params: conversationId,
        query: ITEM_PAGE_QUERY,
        detail: {
          summary: "A conversation's items, paged (newest first unless order=asc)",
          tags: TAGS,
          responses: {
            "200": jsonResponse("One page of items", "InputItemList"),
            ...openAiErrorResponses("invalid_input", "unauthorized", "rate_limited"),
            ...NOT_FOUND,
          },
        },
      },
    )
    .post(
      "/v1/conversations/:id/items",
      async ({ body, params, principal, request }) => {
        const items = await itemsOf(body.items, new RequestPictures(deps.body.pictureHosts), "items");
        const added = await unlessLeft(deps.conversationItems.add(principal.userId, params.id, items, request.signal));
        return added && inputItemList({ items: added, hasMore: false });
      },
      {
        auth: "key",
        params: conversationId,
        query: t.Object({}, { additionalProperties: false, error: QUERY_RULE }),
        parse: jsonBody(deps.body, { pictures: true }),
        body: t.Object({ items: ITEMS }, UNKNOWN_FIELD),
        detail: {
          summary: "Add items at the end of a conversation (after its running turn)",
          tags: TAGS,
          responses: {
            "200": jsonResponse("The items added", "InputItemList"),
            ...openAiErrorResponses("invalid_json", "invalid_input", "unauthorized", "rate_limited"),
            ...NOT_FOUND,
          },
        },
      },
    )
    .get(
      "/v1/conversations/:id/items/:item_id",
      async ({ params, principal }) => inputItemJson(await deps.conversationItems.item(principal.userId, params.id, params.item_id)),
      {
        auth: "key",
        params: itemPath,
        query: t.Object({}, { additionalProperties: false, error: QUERY_RULE }),
        detail: { summary: "One item of a conversation", tags: TAGS, responses: { "200": jsonResponse("The item", "InputItem"), ...COMMON, ...NOT_FOUND } },
      },
    )
    .delete(
      "/v1/conversations/:id/items/:item_id",
      async ({ params, principal, request }) => {
        const conversation = await unlessLeft(deps.conversationItems.deleteItem(principal.userId, params.id, params.item_id, request.signal));
        return conversation && conversationJson(conversation);
      },
      {
        auth: "key",
        params: itemPath,
        detail: {
          summary: "Delete one item of a conversation (after its running turn); a thought alone leaves its message",
          tags: TAGS,
          responses: { "200": jsonResponse("The conversation", "ConversationObject"), ...COMMON, ...NOT_FOUND },
        },
      },
    );
