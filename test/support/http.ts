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

/** The status and body text of a POST of `body` as JSON to `url` + `path`, `key` as the bearer token. */
export async function postJson(url: string, key: string, path: string, body: unknown): Promise<{ status: number; text: string }> {
  const response = await fetch(`${url}${path}`, {
    method: "POST",
    headers: { ...bearer(key), "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: response.status, text: await response.text() };
}

/** Calls `each` with every line `stream` carries (the last one once it ends with a newline), as it arrives. */
export async function eachLine(stream: ReadableStream<Uint8Array>, each: (line: string) => void): Promise<void> {
  const decoder = new TextDecoder();
  let partial = "";
  for await (const chunk of stream) {
    const received = (partial + decoder.decode(chunk, { stream: true })).split("\n");
    partial = received.pop()!;
    for (const line of received) if (line !== "") each(line);
  }
}

export interface RawResponse {
  status: number;
  head: string;
  body: string;
}

/**
 * Writes bytes that fetch would refuse or normalise straight to the server's socket and reads
 * the first response. Resolves with undefined when the server closes without answering.
 */
export async function rawRequest(url: string, request: string | Uint8Array, deadlineMs = 10_000): Promise<RawResponse | undefined> {
  const { hostname, port } = new URL(url);
  const chunks: Uint8Array[] = [];
  const { promise, resolve } = Promise.withResolvers<void>();
  const socket = await Bun.connect({
    hostname,
    port: Number(port),
    socket: {
      data: (_socket, data) => void chunks.push(new Uint8Array(data)),
      close: () => resolve(),
      end: () => resolve(),
      error: () => resolve(),
    },
  });
  socket.write(request);
  socket.flush();
  const timer = setTimeout(() => resolve(), deadlineMs);
  // Requests carry `Connection: close`: the server ends the connection after its answer.
  await promise;
  clearTimeout(timer);
  socket.end();
  const text = new TextDecoder().decode(Buffer.concat(chunks));
  if (text === "") return undefined;
  const split = text.indexOf("\r\n\r\n");
  const head = split < 0 ? text : text.slice(0, split);
  return { status: Number(/^HTTP\/1\.[01] (\d{3})/.exec(head)?.[1]), head, body: split < 0 ? "" : text.slice(split + 4) };
}
