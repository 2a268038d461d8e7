/** Helpers shared by the reliability suite: a real `parley serve` child process and contract checks. */
import { Database } from "bun:sqlite";
import { presetModel } from "../support";

export const ERROR_CODES: Record<number, string> = {
  400: "invalid_json",
  401: "unauthorized",
  403: "forbidden",
  404: "not_found",
  405: "method_not_allowed",
  413: "payload_too_large",
  415: "unsupported_media_type",
  422: "invalid_request",
  429: "rate_limited",
  503: "overloaded",
  500: "internal",
};

export async function until(condition: () => boolean | Promise<boolean>, what: string, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(10);
  }
}

/**
 * Reads a response whole and checks it against the contract: a 2xx, or an error body whose
 * code is the one the status stands for. Returns the status and the parsed body.
 */
export async function contractResponse(response: Response): Promise<{ status: number; body: unknown }> {
  const text = await response.text();
  if (response.status >= 200 && response.status < 300) return { status: response.status, body: text };
  let body: { error?: { code?: unknown; request_id?: unknown } };
  try {
    body = JSON.parse(text);
  } catch {
    throw new Error(`status ${response.status} with a body that is not JSON: ${text.slice(0, 200)}`);
  }
  const expected = ERROR_CODES[response.status];
  if (expected === undefined || body.error?.code !== expected || typeof body.error.request_id !== "string") {
    throw new Error(`status ${response.status} with body ${text.slice(0, 300)}`);
  }
  return { status: response.status, body };
}

export interface ChildServer {
  url: string;
  pid: number;
  lines: string[];
  child: Bun.Subprocess<"ignore", "pipe", "pipe">;
}

/**
 * `bun src/cli.ts serve` on a generated model, resolved once `/readyz` is 200. `dbPath` may
 * be an existing database (a restart on the same data).
 */
export async function startServer(options: {
  dbPath: string;
  adminKey: string;
  preset?: "demo" | "bench-small";
  env?: Record<string, string>;
}): Promise<ChildServer> {
  const model = await presetModel(options.preset ?? "demo");
  const child = Bun.spawn(["bun", "src/cli.ts", "serve"], {
    env: {
      ...Bun.env,
      PARLEY_DB: options.dbPath,
      PARLEY_MODEL: model,
      PARLEY_PORT: "0",
      PARLEY_ADMIN_KEY: options.adminKey,
      PARLEY_THREADS: "1",
      ...options.env,
    },
    cwd: `${import.meta.dir}/../..`,
    stdout: "pipe",
    stderr: "pipe",
  });
  const lines: string[] = [];
  const collect = async (stream: ReadableStream<Uint8Array>) => {
    const decoder = new TextDecoder();
    for await (const chunk of stream) {
      lines.push(...decoder.decode(chunk, { stream: true }).split("\n").filter(Boolean));
      // One log line per request: keep only the recent ones, for failure messages.
      if (lines.length > 400) lines.splice(0, lines.length - 200);
    }
  };
  const collected = Promise.all([collect(child.stdout), collect(child.stderr)]);
  const deadline = Date.now() + 30_000;
  let url: string | undefined;
  while (Date.now() < deadline && child.exitCode === null) {
    url ??= lines.map((line) => /"url":"([^"]+)"/.exec(line)?.[1]).find(Boolean);
    if (url) {
      const ready = await fetch(`${url}/readyz`).then((r) => r.status === 200, () => false);
      if (ready) return { url, pid: child.pid, lines, child };
    }
    await Bun.sleep(30);
  }
  child.kill("SIGKILL");
  await Promise.race([collected, Bun.sleep(1_000)]);
  throw new Error(`server not ready (exit code ${child.exitCode}): ${lines.join("\n")}`);
}

/** Resident set size of a process, in KiB. */
export async function rssKb(pid: number): Promise<number> {
  const status = await Bun.file(`/proc/${pid}/status`).text();
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1]);
}

export function withDb<T>(path: string, read: (db: Database) => T): T {
  const db = new Database(path, { readonly: true });
  try {
    return read(db);
  } finally {
    db.close();
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
