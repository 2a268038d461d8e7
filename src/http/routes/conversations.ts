import { Elysia, t } from "elysia";
import type { ChatService } from "../../chat/service";
import type { ConversationStore } from "../../db/storage";
import { InvalidInput, isAbort, NotFound } from "../../errors";
import { requireKey } from "../auth";
import { CONVERSATION_ID, CONVERSATION_ID_RULE } from "../conversation-id";
import { namingFields } from "../field-names";
import { listedUser, pageWindow, parsePaging } from "../listing-query";
import { errorResponses, jsonResponse } from "../openapi";
import { conversationPageJson, nativeFields } from "../present";

const listingQuery = t.Object({
  user_id: t.Optional(t.String({ description: "`:eq:<int>` or `<int>`; default: the key's own user (others: admin keys only)" })),
  rows_per_page: t.Optional(t.String({ description: "Integer 1..100, default 20" })),
  current_page: t.Optional(t.String({ description: "Integer >= 1, default 1" })),
});

export interface ConversationRouteDeps {
  conversations: ConversationStore;
  chat: ChatService;
}

/** Conversations as a resource: the caller's list, and deleting one. */
export const conversationsRoutes = (deps: ConversationRouteDeps) =>
  new Elysia({ name: "parley/routes/conversations" })
    .onBeforeHandle(namingFields(nativeFields))
    .use(requireKey)
    .get(
      "/api/v1.0/chat/conversations",
      async ({ query, principal }) => {
        const userId = listedUser(query, principal, "conversations");
        const paging = parsePaging(query);
        const { rows, total } = await deps.conversations.list({ userId, ...pageWindow(paging) });
        return conversationPageJson(rows, { current: paging.page, rowsPerPage: paging.rowsPerPage, totalRows: total });
      },
      {
        auth: "key",
        query: listingQuery,
        detail: {
          summary: "List a user's conversations, most recent activity first, paged",
          responses: {
            "200": jsonResponse("One page of conversations", "ConversationPage"),
            ...errorResponses("unauthorized", "forbidden", "invalid_input", "rate_limited"),
          },
        },
      },
    )
    .delete(
      "/api/v1.0/chat/conversations/:conversation_id",
      async ({ params, principal, request, set }) => {
        const id = params.conversation_id;
        if (!CONVERSATION_ID.test(id)) throw new InvalidInput("conversation_id", CONVERSATION_ID_RULE);
        let deleted: boolean;
        try {
          // Waits for a reply running in this conversation; a client that leaves meanwhile deletes nothing.
          deleted = await deps.chat.delete(principal.userId, id, request.signal);
        } catch (error) {
          if (isAbort(error)) return;
          throw error;
        }
        // Another user's conversation by this id is not found either: its existence is not revealed.
        if (!deleted) throw new NotFound("no such conversation");
        set.status = 204;
      },
      {
        auth: "key",
        params: t.Object({ conversation_id: t.String() }),
        detail: {
          summary: "Delete one of the caller's conversations: its messages and cached state",
          responses: {
            "204": { description: "Deleted; the id may start a new conversation" },
            ...errorResponses("unauthorized", "invalid_input", "rate_limited"),
            "404": { ...errorResponses("not_found")["404"], description: "not_found: the caller has no conversation by this id" },
          },
        },
      },
    );
