/**
 * One MCP server as a client of it: connected on first use (an HTTP server) or kept running (a
 * stdio one, restarted when it exits, each change of state told), its tool list cached until the
 * server says it changed, each call held to the server's time and its result to its size.
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import type { Tool } from "@modelcontextprotocol/sdk/types.js";
import pkg from "../../package.json";
import type { McpServerSpec } from "./config";

/** A tool as its server lists it. */
export interface ListedTool {
  name: string;
  description?: string;
  inputSchema: Record<string, unknown>;
  annotations?: Record<string, unknown>;
}

/** Why a call has no output: the tool said it failed, the protocol did, or the server could not be reached. */
export type CallFailure = { kind: "tool"; content: unknown; message: string } | { kind: "protocol"; code: number; message: string };

export type CallOutcome = { output: string; error?: undefined } | { output?: undefined; error: CallFailure };

/** A server's state as told: each change is one line of the service's log. */
export type ServerState = "starting" | "ready" | "exited" | "stopped";

export type StateListener = (label: string, state: ServerState, detail: Record<string, unknown>) => void;

const RESTART_MAX_MS = 30_000;

export class McpConnection {
  private client: Promise<Client> | undefined;
  private listed: Promise<ListedTool[]> | undefined;
  private closed = false;
  private restarts = 0;
  private restartTimer: Timer | undefined;

  constructor(
    readonly spec: McpServerSpec,
    private readonly onState: StateListener,
    /** Headers a request adds to the operator's (an HTTP server's only). */
    private readonly extraHeaders: Record<string, string> = {},
  ) {}

  /** A stdio server is started now and kept running; an HTTP one is reached on first use. */
  start(): void {
    if (this.spec.transport.kind === "stdio") void this.connected().catch(() => undefined);
  }

  /**
   * The server's tools, listed once and again after it says they changed (or it restarted). One
   * listing serves every request waiting for it, so no one request's signal stops it: its time does.
   */
  tools(): Promise<ListedTool[]> {
    if (this.listed) return this.listed;
    const listing = this.connected()
      .then((client) => client.listTools(undefined, { timeout: this.spec.callTimeoutMs }))
      .then(({ tools }) => tools.map(listedTool));
    this.listed = listing;
    // A failed listing is not kept: the next request asks again.
    listing.catch(() => {
      if (this.listed === listing) this.listed = undefined;
    });
    return listing;
  }

  /** Calls the tool; a failure of the tool, the protocol or the server is its outcome, never a throw. */
  async call(name: string, args: Record<string, unknown>, signal?: AbortSignal): Promise<CallOutcome> {
    const { callTimeoutMs, maxResultBytes } = this.spec;
    try {
      const client = await this.connected();
      const result = await client.callTool({ name, arguments: args }, undefined, { timeout: callTimeoutMs, ...(signal ? { signal } : {}) });
      const text = capped(resultText(result), maxResultBytes);
      if (result.isError !== true) return { output: text };
      // The error's content is kept as the tool gave it only within the same cap: else as its capped text.
      const content = Buffer.byteLength(JSON.stringify(result.content ?? null)) <= maxResultBytes ? result.content : [{ type: "text", text }];
      return { error: { kind: "tool", content, message: text } };
    } catch (error) {
      const { code, message } = error as { code?: unknown; message?: string };
      return { error: { kind: "protocol", code: typeof code === "number" ? code : -32603, message: capped(String(message ?? error), maxResultBytes) } };
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.restartTimer);
    const client = this.client;
    this.client = undefined;
    this.listed = undefined;
    if (!client) return;
    await (await client.catch(() => undefined))?.close().catch(() => undefined);
    if (this.spec.transport.kind === "stdio") this.onState(this.spec.label, "stopped", {});
  }

  private connected(): Promise<Client> {
    if (this.closed) return Promise.reject(new Error(`MCP server "${this.spec.label}" is closed`));
    if (this.client) return this.client;
    const client = new Client(
      { name: "parley", version: pkg.version },
      // The list is asked again by the next request that needs it, not at once (nor after a pause).
      { listChanged: { tools: { autoRefresh: false, debounceMs: 0, onChanged: () => (this.listed = undefined) } } },
    );
    const stdio = this.spec.transport.kind === "stdio";
    if (stdio) this.onState(this.spec.label, "starting", { restarts: this.restarts });
    const connecting = client.connect(this.transport()).then(() => client);
    this.client = connecting;
    client.onclose = () => this.lost(connecting);
    connecting.then(
      () => {
        if (stdio) this.onState(this.spec.label, "ready", {});
        this.restarts = 0;
      },
      (error: unknown) => this.lost(connecting, error),
    );
    return connecting;
  }

  /** The connection ended: an HTTP one is made again on next use, a stdio server restarted after a growing pause. */
  private lost(which: Promise<Client>, error?: unknown): void {
    if (this.client !== which) return;
    this.client = undefined;
    this.listed = undefined;
    if (this.closed || this.spec.transport.kind !== "stdio") return;
    const delayMs = Math.min(RESTART_MAX_MS, 1000 * 2 ** this.restarts++);
    this.onState(this.spec.label, "exited", { restart_in_ms: delayMs, ...(error ? { reason: String((error as Error).message ?? error) } : {}) });
    this.restartTimer = setTimeout(() => void this.connected().catch(() => undefined), delayMs);
  }

  private transport(): Transport {
    const { transport } = this.spec;
    if (transport.kind === "http") {
      const headers = new Headers(this.extraHeaders);
      // The operator's headers win over a request's of the same name.
      for (const [name, value] of Object.entries(this.spec.headers)) headers.set(name, value);
      return new StreamableHTTPClientTransport(new URL(transport.url), { requestInit: { headers, redirect: "error" } });
    }
    return new StdioClientTransport({
      command: transport.command,
      args: transport.args,
      env: { ...inheritedEnv(), ...transport.env },
      ...(transport.cwd !== undefined ? { cwd: transport.cwd } : {}),
      stderr: "ignore",
    });
  }
}

/** What a stdio server inherits of Parley's environment: enough to run, none of Parley's own settings. */
function inheritedEnv(): Record<string, string> {
  const kept = ["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "TMPDIR"];
  return Object.fromEntries(kept.flatMap((name) => (process.env[name] === undefined ? [] : [[name, process.env[name]!]])));
}

const listedTool = (tool: Tool): ListedTool => ({
  name: tool.name,
  ...(tool.description !== undefined ? { description: tool.description } : {}),
  inputSchema: tool.inputSchema as Record<string, unknown>,
  ...(tool.annotations !== undefined ? { annotations: tool.annotations as Record<string, unknown> } : {}),
});

/** A result's content as text: its text parts, other parts as JSON; structured content when there is nothing else. */
function resultText(result: { content?: unknown; structuredContent?: unknown; toolResult?: unknown }): string {
  const content = Array.isArray(result.content) ? (result.content as { type: string; text?: string }[]) : [];
  if (content.length === 0) return JSON.stringify(result.structuredContent ?? result.toolResult ?? null);
  return content.map((part) => (part.type === "text" && typeof part.text === "string" ? part.text : JSON.stringify(part))).join("\n");
}

/** The text within `maxBytes` of UTF-8, with a line saying how much was cut. */
export function capped(text: string, maxBytes: number): string {
  const bytes = Buffer.byteLength(text);
  if (bytes <= maxBytes) return text;
  const kept = Buffer.from(text)
    .subarray(0, maxBytes)
    .toString("utf8")
    .replace(/\uFFFD$/, "");
  return `${kept}\n[cut: the result was ${bytes} bytes, over this server's limit of ${maxBytes}]`;
}
