import { Elysia, t } from "elysia";
import type { Db } from "../../db/client";
import { listMessages } from "../../db/messages";
import type { auth } from "../auth";
import { parseListing } from "../listing-query";
import { messageJson } from "../present";

const listingQuery = t.Object({
  user_id: t.Optional(t.String()),
  conversation_id: t.Optional(t.String()),
  rows_per_page: t.Optional(t.String()),
  current_page: t.Optional(t.String()),
  sort_by: t.Optional(t.String()),
});

export const messagesRoutes = (deps: { db: Db; auth: ReturnType<typeof auth> }) =>
  new Elysia({ name: "parley/routes/messages" })
    .use(deps.auth)
    .get(
      "/api/v1.0/chat/messages",
      ({ query, principal }) => {
        const { query: filter, page, rowsPerPage } = parseListing(query, principal);
        const offset = (page - 1) * rowsPerPage;
        // A page far past the end would overflow SQLite's OFFSET; it is empty anyway.
        const { rows, total } = listMessages(deps.db, {
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
      { query: listingQuery },
    );
