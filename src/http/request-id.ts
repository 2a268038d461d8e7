import { Elysia } from "elysia";

const SAFE_ID = /^[A-Za-z0-9._:-]{1,128}$/;
const ids = new WeakMap<Request, string>();

/** The id this request is known by in responses and logs. */
export const requestIdOf = (request: Request): string => ids.get(request) ?? "unknown";

/** Echoes a client's `X-Request-Id` when it is short and safe to log, else mints one. */
export const requestId = new Elysia({ name: "parley/request-id" }).onRequest(({ request, set }) => {
  const supplied = request.headers.get("x-request-id");
  const id = supplied !== null && SAFE_ID.test(supplied) ? supplied : crypto.randomUUID();
  ids.set(request, id);
  set.headers["x-request-id"] = id;
});
