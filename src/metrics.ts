/**
 * Prometheus metrics, on a registry of Parley's own (never prom-client's global one), so each
 * app built in a test counts only its own traffic.
 */
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import type { PoolStats } from "./llm/pool";
import type { CallCount } from "./mcp/servers";

export interface EngineGauges {
  stats(): Pick<PoolStats, "busy" | "queued">;
}

export class Metrics {
  readonly registry = new Registry();

  readonly requests = new Counter({
    name: "parley_http_requests_total",
    help: "HTTP requests by route, method and status",
    labelNames: ["route", "method", "status"] as const,
    registers: [this.registry],
  });

  readonly requestDuration = new Histogram({
    name: "parley_http_request_duration_seconds",
    help: "HTTP request duration until the last byte (streams included)",
    labelNames: ["route", "method"] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120],
    registers: [this.registry],
  });

  readonly timeToFirstToken = new Histogram({
    name: "parley_time_to_first_token_seconds",
    help: "From the chat request's arrival to the reply's first token (queueing included)",
    buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60],
    registers: [this.registry],
  });

  readonly tokensGenerated = new Counter({
    name: "parley_tokens_generated_total",
    help: "Reply tokens generated",
    registers: [this.registry],
  });

  readonly tokensPerSecond = new Histogram({
    name: "parley_generation_tokens_per_second",
    help: "Decode speed of each reply, from its first to its last token",
    buckets: [1, 5, 10, 25, 50, 100, 200, 400, 800, 1600],
    registers: [this.registry],
  });

  readonly promptTokens = new Counter({
    name: "parley_prompt_tokens_total",
    help: "Prompt tokens, by whether they were evaluated now or reused from the KV cache",
    labelNames: ["source"] as const,
    registers: [this.registry],
  });

  readonly rateLimited = new Counter({
    name: "parley_rate_limit_rejections_total",
    help: "Requests refused with 429, by reason",
    labelNames: ["reason"] as const,
    registers: [this.registry],
  });

  readonly quotaRequests = new Counter({
    name: "parley_quota_requests_total",
    help: "Generating requests of users under a token quota, by key role and outcome (served, or quota_exceeded)",
    labelNames: ["role", "outcome"] as const,
    registers: [this.registry],
  });

  readonly modelLoadSeconds = new Gauge({
    name: "parley_model_load_seconds",
    help: "How long the model's last load took, by model",
    labelNames: ["model"] as const,
    registers: [this.registry],
  });

  readonly modelLoads = new Counter({
    name: "parley_model_loads_total",
    help: "Models loaded, by model (at the start, and on demand)",
    labelNames: ["model"] as const,
    registers: [this.registry],
  });

  readonly draftTokens = new Counter({
    name: "parley_draft_tokens_total",
    help: "Tokens replies drafted from their own sequence (PARLEY_SPECULATE), by whether the sampler accepted them",
    labelNames: ["outcome"] as const,
    registers: [this.registry],
  });

  readonly ignoredFields = new Counter({
    name: "parley_ignored_fields_total",
    help: "Request fields ignored as their protocol's own server ignores them (Ollama's), by protocol and field (a name outside the protocol's known ones as other)",
    labelNames: ["protocol", "field"] as const,
    registers: [this.registry],
  });

  drafted(drafted: number, accepted: number): void {
    this.draftTokens.inc({ outcome: "accepted" }, accepted);
    this.draftTokens.inc({ outcome: "rejected" }, drafted - accepted);
  }

  modelLoaded(model: string, seconds: number): void {
    this.modelLoadSeconds.set({ model }, seconds);
    this.modelLoads.inc({ model });
  }

  /** The sources are read when scraped (queue depth, busy sequences, turns), not tracked twice. */
  constructor({
    engines,
    turns,
    responses,
    statesInMemory,
    mcpCalls,
  }: {
    engines: () => readonly EngineGauges[];
    turns: () => number;
    responses?: () => Promise<number>;
    /** Bytes of saved KV states held in memory (PARLEY_KV_RAM_MB). */
    statesInMemory?: () => number;
    /** The calls made of MCP servers' tools, by server and outcome (PARLEY_MCP_SERVERS). */
    mcpCalls?: () => readonly CallCount[];
  }) {
    const total = (field: "queued" | "busy") => engines().reduce((sum, engine) => sum + engine.stats()[field], 0);
    // Labelled series exist from the start, so a scrape shows zeros rather than nothing.
    for (const reason of ["requests", "streams"]) this.rateLimited.inc({ reason }, 0);
    for (const source of ["cached", "evaluated"]) this.promptTokens.inc({ source }, 0);
    for (const outcome of ["accepted", "rejected"]) this.draftTokens.inc({ outcome }, 0);
    // Read when scraped. A read that fails (a database that cannot answer now) leaves the last
    // value: the scrape still succeeds.
    const observed = (name: string, help: string, read: () => number | Promise<number>) =>
      new Gauge({
        name,
        help,
        registers: [this.registry],
        async collect() {
          await Promise.resolve()
            .then(read)
            .then(
              (value) => this.set(value),
              () => undefined,
            );
        },
      });
    observed("parley_queue_depth", "Chat requests waiting for a free sequence", () => total("queued"));
    observed(
      "parley_chat_turns",
      "Chat turns admitted and not yet answered: generating, or waiting for a sequence or for their conversation's previous turn",
      turns,
    );
    if (responses)
      observed("parley_responses_kept", "Responses of /v1/responses kept in the database, of every user (PARLEY_RESPONSES_TTL_DAYS bounds them)", responses);
    if (statesInMemory)
      observed("parley_kv_memory_bytes", "Bytes of conversations' saved KV states held in memory (PARLEY_KV_RAM_MB bounds them)", statesInMemory);
    if (mcpCalls)
      new Counter({
        name: "parley_mcp_calls_total",
        help: "Calls of MCP servers' tools the service made, by server label and outcome (ok; tool_error: the tool answered with an error; failed: the call did, timed out or found no server)",
        labelNames: ["server", "outcome"] as const,
        registers: [this.registry],
        collect() {
          this.reset();
          for (const { server, outcome, count } of mcpCalls()) this.inc({ server, outcome }, count);
        },
      });
    observed("parley_sequences_busy", "Sequences generating a reply", () => total("busy"));
    observed("parley_models_loaded", "Models loaded now (PARLEY_MAX_LOADED_MODELS at most)", () => engines().length);
  }
}
