import { Elysia, t } from "elysia";
import type { MessageStore } from "../../db/storage";
import { requireKey } from "../auth";
import { parseListing } from "../listing-query";
import { errorResponses, messagePageSchema } from "../openapi";
import { messageJson } from "../present";

const listingQuery = t.Object({
  user_id: t.Optional(t.String({ description: "`:eq:<int>` or `<int>`; default: the key's own user" })),
  conversation_id: t.Optional(t.String({ description: "`:eq:<id>` or `<id>`: only this conversation" })),
  rows_per_page: t.Optional(t.String({ description: "Integer 1..100, default 20" })),
  current_page: t.Optional(t.String({ description: "Integer >= 1, default 1" })),
  sort_by: t.Optional(t.String({ description: "`<created_at|id>:<asc|desc>`, default created_at:desc" })),
});

export const messagesRoutes = (deps: { messages: MessageStore }) =>
  new Elysia({ name: "parley/routes/messages" })
    .use(requireKey)
    .get(
      "/api/v1.0/chat/messages",
      async ({ query, principal }) => {
        const { query: filter, page, rowsPerPage } = parseListing(query, principal);
        const offset = (page - 1) * rowsPerPage;
        // A page far past the end would overflow SQLite's OFFSET; it is empty anyway.
        const { rows, total } = await deps.messages.list({
          ...filter,
          limit: Number.isSafeInteger(offset) ? rowsPerPage : 0,
          offset: Number.isSafeInteger(offset) ? offset : 0,
        });
        return {
          data: rows.map(messageJson),
          pagination: {
            current_page: page,
            rows_per_page: rowsPerPage,
            total_rows: total,
            total_pages: Math.ceil(total / rowsPerPage),
          },
        };
      },
      {
        auth: "key",
        query: listingQuery,
        detail: {
          summary: "List a user's stored messages, paged and sorted",
          responses: {
            "200": { description: "One page of messages", content: { "application/json": { schema: messagePageSchema } } },
            ...errorResponses(401, 403, 422, 429),
          },
        } as never,
      },
    );
