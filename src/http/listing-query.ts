import type { MessageQuery, Principal, SortDirection, SortField } from "../db/types";
import { Forbidden, InvalidInput } from "../errors";
import { CONVERSATION_ID, CONVERSATION_ID_RULE } from "./conversation-id";

export interface ListingParams {
  user_id?: string;
  conversation_id?: string;
  rows_per_page?: string;
  current_page?: string;
  sort_by?: string;
}

const DIGITS = /^\d+$/;

/** `:eq:<v>` and `<v>` mean the same; any other `:op:` is not supported. */
function equalsValue(param: string, raw: string): string {
  if (!raw.startsWith(":")) return raw;
  if (raw.startsWith(":eq:")) return raw.slice(4);
  throw new InvalidInput(param, `${param} supports only the :eq: operator`);
}

function integer(param: string, raw: string | undefined, fallback: number, max: number): number {
  if (raw === undefined) return fallback;
  const value = Number(raw);
  if (!DIGITS.test(raw) || value < 1 || value > max) {
    throw new InvalidInput(param, `${param} must be an integer from 1${max === Infinity ? " up" : ` to ${max}`}`);
  }
  return value;
}

function sortOrder(raw: string | undefined): { sortField: SortField; sortDirection: SortDirection } {
  if (raw === undefined) return { sortField: "created_at", sortDirection: "desc" };
  const [field, direction, extra] = raw.split(":");
  if ((field !== "created_at" && field !== "id") || (direction !== "asc" && direction !== "desc") || extra !== undefined) {
    throw new InvalidInput("sort_by", "sort_by must be <field>:<direction> with field created_at or id and direction asc or desc");
  }
  return { sortField: field, sortDirection: direction };
}

export interface Paging {
  page: number;
  rowsPerPage: number;
}

export interface Listing extends Paging {
  query: Omit<MessageQuery, "limit" | "offset">;
}

/** `rows_per_page` and `current_page`, as every listing takes them. */
export function parsePaging(params: Pick<ListingParams, "rows_per_page" | "current_page">): Paging {
  return {
    rowsPerPage: integer("rows_per_page", params.rows_per_page, 20, 100),
    page: integer("current_page", params.current_page, 1, Infinity),
  };
}

/** The page's rows as a limit and offset; a page so far past the end that its offset overflows is empty anyway. */
export function pageWindow({ page, rowsPerPage }: Paging): { limit: number; offset: number } {
  const offset = (page - 1) * rowsPerPage;
  return Number.isSafeInteger(offset) ? { limit: rowsPerPage, offset } : { limit: 0, offset: 0 };
}

/** The user a listing reads: the key's own unless `user_id` names another, which only admin keys may. */
export function listedUser(params: Pick<ListingParams, "user_id">, principal: Principal, what: string): number {
  let userId = principal.userId;
  if (params.user_id !== undefined) {
    const raw = equalsValue("user_id", params.user_id);
    if (!DIGITS.test(raw) || !Number.isSafeInteger(Number(raw))) {
      throw new InvalidInput("user_id", "user_id must be an integer, optionally written :eq:<integer>");
    }
    userId = Number(raw);
  }
  if (principal.role !== "admin" && userId !== principal.userId) {
    throw new Forbidden(`this key may only read its own user's ${what}`, "user_id");
  }
  return userId;
}

/** Validates the message listing's query string and applies the access rule for `user` keys. */
export function parseListing(params: ListingParams, principal: Principal): Listing {
  const userId = listedUser(params, principal, "messages");

  let conversationId: string | undefined;
  if (params.conversation_id !== undefined) {
    conversationId = equalsValue("conversation_id", params.conversation_id);
    if (!CONVERSATION_ID.test(conversationId)) {
      throw new InvalidInput("conversation_id", CONVERSATION_ID_RULE);
    }
  }

  return { query: { userId, conversationId, ...sortOrder(params.sort_by) }, ...parsePaging(params) };
}
