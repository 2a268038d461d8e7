/** Requests as Parley's clients make them. */

export const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

/** POST /api/v1.0/chat: `body` as JSON, `key` as the bearer token. */
export const postChat = (url: string, key: string, body: Record<string, unknown>, signal?: AbortSignal) =>
  fetch(`${url}/api/v1.0/chat`, {
    method: "POST",
    headers: { ...bearer(key), "content-type": "application/json" },
    body: JSON.stringify(body),
    signal,
  });
