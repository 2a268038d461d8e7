import { Elysia, t } from "elysia";
import type { MessageStore } from "../../db/storage";
import { requireKey } from "../auth";
import { pageWindow, parseListing } from "../listing-query";
import { errorResponses, jsonResponse } from "../openapi";
import { pageJson } from "../present";

const listingQuery = t.Object({
  user_id: t.Optional(t.String({ description: "`:eq:<int>` or `<int>`; default: the key's own user" })),
  conversation_id: t.Optional(t.String({ description: "`:eq:<id>` or `<id>`: only this conversation" })),
  rows_per_page: t.Optional(t.String({ description: "Integer 1..100, default 20" })),
  current_page: t.Optional(t.String({ description: "Integer >= 1, default 1" })),
  sort_by: t.Optional(t.String({ description: "`<created_at|id>:<asc|desc>`, default created_at:desc" })),
});

export const messagesRoutes = (deps: { messages: MessageStore }) =>
  new Elysia({ name: "parley/routes/messages" }).use(requireKey).get(
    "/api/v1.0/chat/messages",
    async ({ query, principal }) => {
      const { query: filter, page, rowsPerPage } = parseListing(query, principal);
      const { rows, total } = await deps.messages.list({ ...filter, ...pageWindow({ page, rowsPerPage }) });
      return pageJson(rows, { current: page, rowsPerPage, totalRows: total });
    },
    {
      auth: "key",
      query: listingQuery,
      detail: {
        summary: "List a user's stored messages, paged and sorted",
        responses: {
          "200": jsonResponse("One page of messages", "MessagePage"),
          ...errorResponses("unauthorized", "forbidden", "invalid_input", "rate_limited"),
        },
      },
    },
  );
