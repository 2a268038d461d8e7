/**
 * The operator's MCP servers, one connection each, and the check that stands between a request and
 * them: a request names a listed label (and, if it gives a URL, that server's own), as a caller
 * the server allows; anything else is refused naming the request's field, and an unlisted server
 * and one the caller may not use read alike.
 */
import { InvalidInput } from "../errors";
import type { McpServerSpec } from "./config";
import { type CallOutcome, McpConnection, type StateListener } from "./connection";

/** Who asks: the key's user and role. */
export interface Caller {
  userName: string;
  role: string;
}

/** A server as a request names it; `index` is its place among the request's tools. */
export interface ServerRequest {
  index: number;
  label: string;
  url?: string;
  /** Headers the request adds (an HTTP server's only). */
  headers: Record<string, string>;
}

/** A server opened for one request: its connection, its tools' calls (counted), and what ends the request's use of it. */
export interface OpenedServer {
  label: string;
  connection: McpConnection;
  call(name: string, args: Record<string, unknown>, signal?: AbortSignal): Promise<CallOutcome>;
  release(): Promise<void>;
}

/** What a call came to: an output, the tool's own error, or a failure of the call (protocol, timeout, server gone). */
export const CALL_OUTCOMES = ["ok", "tool_error", "failed"] as const;
type CallOutcomeName = (typeof CALL_OUTCOMES)[number];
export type CallCount = { server: string; outcome: CallOutcomeName; count: number };

export class McpServers {
  private readonly connections = new Map<string, McpConnection>();
  /** Calls made since the start, by server and outcome. */
  private readonly counts = new Map<string, Record<CallOutcomeName, number>>();

  constructor(
    specs: readonly McpServerSpec[],
    private readonly onState: StateListener,
  ) {
    for (const spec of specs) {
      this.connections.set(spec.label, new McpConnection(spec, onState));
      this.counts.set(spec.label, { ok: 0, tool_error: 0, failed: 0 });
    }
  }

  get size(): number {
    return this.connections.size;
  }

  /** Calls made since the start, by server and outcome: every listed server's outcomes, at 0 until one comes. */
  calls(): CallCount[] {
    return [...this.counts].flatMap(([server, counts]) => CALL_OUTCOMES.map((outcome) => ({ server, outcome, count: counts[outcome] })));
  }

  /** Starts the stdio servers. */
  start(): void {
    for (const connection of this.connections.values()) connection.start();
  }

  /**
   * The server for this request and caller; a request's own headers get a connection of their
   * own, closed on release (the operator's connection and its cached list stay the operator's).
   */
  open(request: ServerRequest, caller: Caller): OpenedServer {
    const shared = this.connections.get(request.label);
    if (!shared || !allows(shared.spec, caller)) {
      const listed = [...this.connections.values()].filter((connection) => allows(connection.spec, caller)).map(({ spec }) => spec.label);
      throw new InvalidInput(
        { part: "serverTool", index: request.index, detail: "label" },
        `no MCP server ${JSON.stringify(request.label)} is listed for this key (${listed.length ? `listed: ${listed.join(", ")}` : "none is listed"})`,
      );
    }
    const { transport } = shared.spec;
    if (request.url !== undefined && (transport.kind !== "http" || !sameUrl(request.url, transport.url))) {
      throw new InvalidInput(
        { part: "serverTool", index: request.index, detail: "url" },
        `is not the URL of MCP server ${JSON.stringify(request.label)}: the service connects only where its operator lists (leave it out to use the listed one)`,
      );
    }
    if (Object.keys(request.headers).length === 0) return this.opened(request.label, shared, async () => undefined);
    if (transport.kind !== "http")
      throw new InvalidInput(
        { part: "serverTool", index: request.index, detail: "headers" },
        `MCP server ${JSON.stringify(request.label)} runs on this host: it takes no headers`,
      );
    const own = new McpConnection(shared.spec, this.onState, request.headers);
    return this.opened(request.label, own, () => own.close());
  }

  private opened(label: string, connection: McpConnection, release: () => Promise<void>): OpenedServer {
    const call = async (name: string, args: Record<string, unknown>, signal?: AbortSignal) => {
      const outcome = await connection.call(name, args, signal);
      this.counts.get(label)![outcome.error === undefined ? "ok" : outcome.error.kind === "tool" ? "tool_error" : "failed"]++;
      return outcome;
    };
    return { label, connection, call, release };
  }

  async close(): Promise<void> {
    await Promise.all([...this.connections.values()].map((connection) => connection.close()));
  }
}

const allows = (spec: McpServerSpec, caller: Caller): boolean =>
  spec.allow === undefined || spec.allow.users.includes(caller.userName) || spec.allow.roles.includes(caller.role);

function sameUrl(given: string, listed: string): boolean {
  try {
    return new URL(given).href === listed;
  } catch {
    return false;
  }
}

/** No servers: what a service without `PARLEY_MCP_SERVERS` has. */
export const NO_MCP_SERVERS = new McpServers([], () => undefined);
