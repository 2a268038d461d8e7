/**
 * Configuration is read once, from the environment with command-line flag overrides,
 * and validated up front: a bad value stops start-up with a message naming the variable.
 */
import { readFileSync, statSync } from "node:fs";
import { dirname } from "node:path";
import { isPostgresUrl } from "./db/open";
import {
  CONTEXT_OVERFLOW_MODES,
  type ContextOverflow,
  FLASH_ATTENTION_MODES,
  type FlashAttentionMode,
  type GpuBackend,
  KV_TYPES,
  type KvType,
  PROMPT_ENDS_MODES,
  type PromptEnds,
  REASONING_MODES,
  type ReasoningMode,
  SPECULATE_MODES,
  type Speculate,
} from "./llm/types";
import { LOG_LEVELS, type LogLevel } from "./log";
import { type McpServerSpec, parseMcpServers } from "./mcp/config";

export interface Config {
  host: string;
  port: number;
  /** A SQLite file path, or a `postgres://` URL (src/db/open.ts). */
  dbPath: string;
  /** PostgreSQL connections per process. */
  dbPool: number;
  /** PostgreSQL: each storage call's deadline; past it, or with the database unreachable, 503. */
  dbTimeoutMs: number;
  /** PostgreSQL: how long start-up waits for an unreachable database, trying again every second. */
  dbWaitS: number;
  /** Names this node in every response (`X-Parley-Node`); unset, no such header. */
  nodeName?: string;
  /** PostgreSQL: how long a conversation stays held by a node that stopped renewing its lease (died). */
  leaseTtlS: number;
  /** Kept responses older than this many days are deleted; 0 = kept until deleted. */
  responsesTtlDays: number;
  /** Files that are not the database: saved KV states (`kv/`), the chat-format cache. */
  dataDir: string;
  /** Used only when the database holds no keys yet (first start). */
  adminKey?: string;
  /** `.gguf` files served besides those in `modelsDir`, the first the default; none: the directory's first, else the demo model. */
  modelPaths: string[];
  modelsDir: string;
  /** A name clients send → a model's id. */
  modelAliases: Record<string, string>;
  maxLoadedModels: number;
  /** How long an idle model stays loaded: 0 unloads it at once, -1 never. */
  keepAliveS: number;
  parallel: number;
  /** Unset means the model's training context, capped at 4096. */
  contextSize?: number;
  /** Unset means automatic: see the engine. */
  threads?: number;
  /** The GPU backend to offload to; false: the CPU alone. */
  gpu: GpuBackend | false;
  /** Layers offloaded with `gpu`; unset: all of them. */
  gpuLayers?: number;
  queueMax: number;
  bodyLimitBytes: number;
  pictureBodyLimitBytes: number;
  pictureHosts: string[];
  /** The MCP servers requests may name (src/mcp/config.ts). */
  mcpServers: McpServerSpec[];
  bodyTimeoutS: number;
  heartbeatMs: number;
  logLevel: LogLevel;
  /** Requests per minute per key; 0 = unlimited. */
  rateLimit: number;
  maxStreamsPerKey: number;
  /** 0 = no cap. */
  generationTimeoutS: number;
  shutdownGraceS: number;
  metricsPublic: boolean;
  corsOrigins: string[];
  /** Disk budget for saved KV states (`<dataDir>/kv/`); 0 = none saved. */
  kvCacheMb: number;
  kvRamMb: number;
  /** Put before every native conversation's history; the text itself, already read from its file. */
  systemPrompt?: string;
  /** A reasoning model's thought: apart from the answer, hidden, or inline in it. */
  reasoning: ReasoningMode;
  /** Unset means the engine's default: see the engine. */
  batchSize?: number;
  flashAttention: FlashAttentionMode;
  kvType: KvType;
  contextOverflow: ContextOverflow;
  contextSlackPercent: number;
  promptEnds: PromptEnds;
  speculate: Speculate;
  draftModel: string | undefined;
  /** From a checkout without Parley's compiled natives: `auto` builds them behind the server, `off` never; anything else is the command that builds them. */
  buildNatives: string;
}

/**
 * A command cannot start, for a reason the operator can fix: the CLI prints one line naming the
 * setting, never a stack trace, and exits 2 for configuration, 1 otherwise.
 */
export class Refusal extends Error {
  constructor(
    message: string,
    readonly exitCode: 1 | 2 = 1,
  ) {
    super(message);
  }
}

export class ConfigError extends Refusal {
  override name = "ConfigError";

  constructor(message: string) {
    super(message, 2);
  }
}

type Env = Record<string, string | undefined>;

interface Spec {
  env: string;
  flag: string;
  /** One line, for `--help`. */
  help: string;
  default: string;
  /** The whole story, for docs/configuration.md. */
  doc: string;
  /** The default as docs/configuration.md shows it (Markdown): what an empty `default` means. */
  shownDefault: string;
}

/** The single source for names, flags, defaults and help text; docs/configuration.md is generated from it (`bun run docs`). */
export const CONFIG_SPEC = {
  host: { env: "PARLEY_HOST", doc: "address to listen on", shownDefault: "`127.0.0.1`", flag: "--host", default: "127.0.0.1", help: "Address to listen on" },
  port: {
    env: "PARLEY_PORT",
    doc: "TCP port (`0` = any free port)",
    shownDefault: "`8080`",
    flag: "--port",
    default: "8080",
    help: "TCP port (0 = any free port)",
  },
  dbPath: {
    env: "PARLEY_DB",
    doc: "SQLite database file (created, migrated automatically; one `parley serve` at a time per file, held by `<db>.lock` beside it), or a PostgreSQL URL `postgres://user:password@host/db` (`postgresql://` too; a unix socket as libpq writes it, `postgresql://user:password@/db?host=/run/postgresql`) shared by several nodes: see [Scaling out](operations.md#scaling-out)",
    shownDefault: "`./data/parley.db`",
    flag: "--db",
    default: "./data/parley.db",
    help: "SQLite database file, or a PostgreSQL URL (postgres://user:password@host/db, ?host=/socket/dir for a unix socket) shared by several nodes",
  },
  dbPool: {
    env: "PARLEY_DB_POOL",
    doc: "PostgreSQL connections this process may open",
    shownDefault: "`10`",
    flag: "--db-pool",
    default: "10",
    help: "PostgreSQL connections this process may open",
  },
  dbTimeoutMs: {
    env: "PARLEY_DB_TIMEOUT_MS",
    doc: "PostgreSQL: longest a database call may take, connecting included; past it, or with the database unreachable, requests get `503` with `Retry-After` ([deploy/README.md](../deploy/README.md#when-the-database-is-away))",
    shownDefault: "`2000`",
    flag: "--db-timeout-ms",
    default: "2000",
    help: "PostgreSQL: longest a database call may take (connecting included); past it, or with the database unreachable, requests get 503 with Retry-After",
  },
  dbWaitS: {
    env: "PARLEY_DB_WAIT_S",
    doc: "PostgreSQL: seconds start-up waits for an unreachable database, trying again every second (`0` = not at all)",
    shownDefault: "`60`",
    flag: "--db-wait",
    default: "60",
    help: "PostgreSQL: seconds start-up waits for an unreachable database, trying again every second (0 = not at all)",
  },
  nodeName: {
    env: "PARLEY_NODE_NAME",
    doc: "names this node in every response's `X-Parley-Node` header, so an operator behind a load balancer sees which node served what (the shipped systemd unit sets host and port); unset: no such header",
    shownDefault: "—",
    flag: "--node-name",
    default: "",
    help: "Names this node in every response's X-Parley-Node header (unset: no header)",
  },
  leaseTtlS: {
    env: "PARLEY_LEASE_TTL_S",
    doc: "PostgreSQL: seconds a conversation stays held by a node that stopped renewing its turn's lease (a crashed node) before another node may take it over",
    shownDefault: "`10`",
    flag: "--lease-ttl",
    default: "10",
    help: "PostgreSQL: seconds a conversation stays held by a node that stopped renewing its turn's lease (a crashed node)",
  },
  responsesTtlDays: {
    env: "PARLEY_RESPONSES_TTL_DAYS",
    doc: "days a kept response of `/v1/responses` (and its stream's events) is kept, counted from its creation; checked hourly; `0` = until deleted. A conversation's items stay: they are the conversation's",
    shownDefault: "`0`",
    flag: "--responses-ttl-days",
    default: "0",
    help: "Days a kept response of /v1/responses is kept (0 = until deleted)",
  },
  dataDir: {
    env: "PARLEY_DATA_DIR",
    doc: "where saved KV states (`kv/`) and the chat-format cache (`chat-wrappers.json`) live (created if missing)",
    shownDefault: "the database file's directory (`./data` with PostgreSQL)",
    flag: "--data-dir",
    default: "",
    help: "Directory for saved KV states (kv/) and the chat-format cache (default: the database file's directory; ./data with PostgreSQL)",
  },
  adminKey: {
    env: "PARLEY_ADMIN_KEY",
    doc: "admin key to create on the first start (24–256 token characters); else a random one is printed. Read only on the first start: a later start with a key that is not an admin key of the database logs a warning",
    shownDefault: "—",
    flag: "--admin-key",
    default: "",
    help: "Admin key to create on first start (else a random one is printed)",
  },
  modelPaths: {
    env: "PARLEY_MODEL",
    doc: "GGUF model files, comma-separated, served besides the models directory's; the first is the default model. Unset: the directory's first model Parley did not generate is the default, else the demo model (`docs/models.md`, Model ids and the default model)",
    shownDefault: "—",
    flag: "--model",
    default: "",
    help: "GGUF model file(s), comma-separated; the first is the default",
  },
  modelAliases: {
    env: "PARLEY_MODEL_ALIASES",
    doc: "names clients send mapped onto models, `name=id,…` (e.g. `gpt-4o-mini=qwen2.5-0.5b-instruct`); with one model every name is that model",
    shownDefault: "—",
    flag: "--model-aliases",
    default: "",
    help: "Model names mapped onto model ids: name=id,…",
  },
  maxLoadedModels: {
    env: "PARLEY_MAX_LOADED_MODELS",
    doc: "models loaded at once; a request for another unloads the least recently used idle one",
    shownDefault: "`1`",
    flag: "--max-loaded-models",
    default: "1",
    help: "Models loaded at once",
  },
  keepAliveS: {
    env: "PARLEY_KEEP_ALIVE_S",
    doc: "seconds an idle model stays loaded; `0` unloads it as soon as it is idle, `-1` never",
    shownDefault: "`300`",
    flag: "--keep-alive",
    default: "300",
    help: "Seconds an idle model stays loaded (0: at once, -1: never)",
  },
  modelsDir: {
    env: "PARLEY_MODELS_DIR",
    doc: "where to look for GGUF files",
    shownDefault: "`./models`",
    flag: "--models-dir",
    default: "./models",
    help: "Where to look for GGUF files",
  },
  parallel: {
    env: "PARLEY_PARALLEL",
    doc: "replies generated at once (context sequences)",
    shownDefault: "`2`",
    flag: "--parallel",
    default: "2",
    help: "Replies generated at once (context sequences)",
  },
  contextSize: {
    env: "PARLEY_CONTEXT_SIZE",
    doc: "tokens of context per sequence",
    shownDefault: "model's, capped at 4096",
    flag: "--context-size",
    default: "",
    help: "Tokens per sequence (default: the model's, capped at 4096)",
  },
  threads: {
    env: "PARLEY_THREADS",
    doc: "CPU threads for inference; auto is 1 for tiny models (< 32 MB, e.g. the demo), else the physical cores",
    shownDefault: "auto",
    flag: "--threads",
    default: "",
    help: "CPU threads for inference (default: 1 for tiny models, else physical cores)",
  },
  gpu: {
    env: "PARLEY_GPU",
    doc: "`cuda` (or `true`) offloads the models to an NVIDIA GPU through the CUDA natives (`bun run natives --gpu cuda`, or an executable built with `--gpu cuda`: `docs/operations.md`); where none is usable (no such natives, no driver, no GPU) one warning says why and the models run on the CPU. `false`: the CPU alone",
    shownDefault: "`false`",
    flag: "--gpu",
    default: "false",
    help: "Offload to an NVIDIA GPU: cuda (or true), or false for the CPU alone",
  },
  gpuLayers: {
    env: "PARLEY_GPU_LAYERS",
    doc: "with `PARLEY_GPU`, how many of a model's layers go to the GPU (the rest run on the CPU), for a model larger than the GPU's memory; unset: all of them. A model that does not fit is not loaded (`503 overloaded`, naming the GPU's memory)",
    shownDefault: "all",
    flag: "--gpu-layers",
    default: "",
    help: "With --gpu, layers offloaded to the GPU (default: all)",
  },
  queueMax: {
    env: "PARLEY_QUEUE_MAX",
    doc: "chat requests that may wait (for a free sequence, or for their conversation's previous turn) before `503 overloaded`",
    shownDefault: "`64`",
    flag: "--queue-max",
    default: "64",
    help: "Chat requests that may wait (for a free sequence or their conversation's previous turn) before 503",
  },
  bodyLimitBytes: {
    env: "PARLEY_BODY_LIMIT",
    doc: "largest request body in bytes, 1024 to 67108864 (`413` above); on the routes that may carry pictures, the most text beside them (every string, number and field name but the pictures')",
    shownDefault: "`65536`",
    flag: "--body-limit",
    default: "65536",
    help: "Largest request body in bytes (413 above)",
  },
  pictureBodyLimitBytes: {
    env: "PARLEY_PICTURE_BODY_LIMIT",
    doc: "largest body in bytes, 1024 to 268435456, of a request that may carry pictures (the chat, Responses, Conversations, Messages and Ollama chat routes: pictures come in the JSON, in base64) (`413` above); the text beside them stays within `PARLEY_BODY_LIMIT`",
    shownDefault: "`33554432`",
    flag: "--picture-body-limit",
    default: "33554432",
    help: "Largest body in bytes of a request that may carry pictures (413 above)",
  },
  pictureHosts: {
    env: "PARLEY_PICTURE_HOSTS",
    doc: "host names, comma-separated, whose `http(s)` picture URLs a request may give: fetched (no redirect, 10 s, the picture's limits); empty: a remote picture URL is `400` (the service fetches nothing)",
    shownDefault: "empty",
    flag: "--picture-hosts",
    default: "",
    help: "Hosts whose http(s) picture URLs are fetched, comma-separated (default none)",
  },
  mcpServers: {
    env: "PARLEY_MCP_SERVERS",
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the operator's ${NAME}, written as the file takes it
    doc: "the MCP servers whose tools a response may run in the service (`docs/operations.md`, MCP servers), `label=http://host:port/mcp,…`, or `@file` naming a JSON object of labels to `{url or command, args?, env?, cwd?, headers?, users?, roles?, timeout_s?, max_result_bytes?}` (a stdio `command` is started and restarted by Parley; `${NAME}` in a header or env value is taken from the environment); empty: a request that names a server is `400` (the service connects to none)",
    shownDefault: "empty",
    flag: "--mcp-servers",
    default: "",
    help: "MCP servers requests may name: label=url,… or @file.json (default none)",
  },
  bodyTimeoutS: {
    env: "PARLEY_BODY_TIMEOUT_S",
    doc: "seconds a request body may take to arrive (`408` and the connection closed after)",
    shownDefault: "`10`",
    flag: "--body-timeout",
    default: "10",
    help: "Seconds a request body may take to arrive (408 and the connection closed after)",
  },
  heartbeatMs: {
    env: "PARLEY_HEARTBEAT_MS",
    doc: "interval of `: ping` comments on streams (100–15000)",
    shownDefault: "`10000`",
    flag: "--heartbeat-ms",
    default: "10000",
    help: "Interval of `: ping` comments on streams",
  },
  logLevel: {
    env: "PARLEY_LOG_LEVEL",
    doc: "`fatal`, `error`, `warn`, `info`, `debug`, `trace` or `silent`",
    shownDefault: "`info`",
    flag: "--log-level",
    default: "info",
    help: `Log level: ${LOG_LEVELS.join(", ")}`,
  },
  rateLimit: {
    env: "PARLEY_RATE_LIMIT",
    doc: "requests per minute per key (token bucket; `0` = unlimited)",
    shownDefault: "`120`",
    flag: "--rate-limit",
    default: "120",
    help: "Requests per minute per key (0 = unlimited)",
  },
  maxStreamsPerKey: {
    env: "PARLEY_MAX_STREAMS_PER_KEY",
    doc: "streams one key may hold open at once (`429` beyond)",
    shownDefault: "`20`",
    flag: "--max-streams-per-key",
    default: "20",
    help: "Streams one key may hold open at once",
  },
  generationTimeoutS: {
    env: "PARLEY_GENERATION_TIMEOUT_S",
    doc: 'longest a reply may generate, counted from its first token; the reply is then stored with `finish_reason: "length"` (`0` = no cap)',
    shownDefault: "`300`",
    flag: "--generation-timeout",
    default: "300",
    help: "Longest a reply may generate, from its first token; then it is stored as `length` (0 = no cap)",
  },
  shutdownGraceS: {
    env: "PARLEY_SHUTDOWN_GRACE_S",
    doc: "on SIGTERM/SIGINT, how long running replies may finish before they are cancelled",
    shownDefault: "`30`",
    flag: "--shutdown-grace",
    default: "30",
    help: "On SIGTERM/SIGINT, how long running replies may finish before they are cancelled",
  },
  corsOrigins: {
    env: "PARLEY_CORS_ORIGINS",
    doc: "comma-separated origins (`https://app.example.com`) whose pages may call the API from a browser, or `*` for any",
    shownDefault: "(none)",
    flag: "--cors-origins",
    default: "",
    help: "Comma-separated origins (https://app.example.com) whose pages may call the API from a browser, or * for any",
  },
  metricsPublic: {
    env: "PARLEY_METRICS_PUBLIC",
    doc: "serve `/metrics` without an admin key",
    shownDefault: "`false`",
    flag: "--metrics-public",
    default: "false",
    help: "Serve /metrics without an admin key",
  },
  kvCacheMb: {
    env: "PARLEY_KV_CACHE_MB",
    doc: "disk for saved conversation KV states in `kv/` in the data directory (least recently used dropped first; `0` = off)",
    shownDefault: "`2048`",
    flag: "--kv-cache-mb",
    default: "2048",
    help: "MiB of disk for saved conversation KV states in the data directory, least recently used dropped first (0 = off)",
  },
  kvRamMb: {
    env: "PARLEY_KV_RAM_MB",
    doc: "memory for saved conversation KV states in front of their disk (`PARLEY_KV_CACHE_MB`), shared by every loaded model: a returning conversation's state is copied back from memory, and a state reaches the disk only once memory has no room for it, or at shutdown; a crash loses what memory held (re-evaluated from history). Needs Parley's compiled natives (the executable, or `bun run natives`); `0` = disk only, and `PARLEY_KV_CACHE_MB=0` turns both off",
    shownDefault: "`1024`",
    flag: "--kv-ram-mb",
    default: "1024",
    help: "MiB of memory for saved conversation KV states before they go to disk (0 = disk only)",
  },
  systemPrompt: {
    env: "PARLEY_SYSTEM_PROMPT",
    doc: "a system message put before every conversation's history (an operator's persona): the text itself, or `@path/to/file` read at start (a missing or empty file stops start-up); not stored, so changing it applies to every conversation's next turn. Evaluated into every sequence at start, before the server is ready, so a new conversation's first turn does not evaluate it",
    shownDefault: "—",
    flag: "--system-prompt",
    default: "",
    help: "System message before every conversation's history (a persona): the text, or @path to read it from a file at start; not stored with conversations",
  },
  batchSize: {
    env: "PARLEY_BATCH_SIZE",
    doc: "prompt tokens evaluated per decoding step: a long prompt takes several steps, and the replies already running get a token in each (smaller: smoother streams while a long prompt arrives; larger: faster prompts)",
    shownDefault: "`512`",
    flag: "--batch-size",
    default: "",
    help: "Prompt tokens evaluated per decoding step: a longer prompt takes several steps, interleaved with the running replies (default 512)",
  },
  flashAttention: {
    env: "PARLEY_FLASH_ATTENTION",
    doc: "llama.cpp's flash attention: `on`, `off`, or `auto` (on: never slower in `bun run bench attention` on `bench-small`, and faster after a short prompt; llama-server's default too)",
    shownDefault: "`auto`",
    flag: "--flash-attention",
    default: "auto",
    help: "Flash attention: auto (the measured default), on or off",
  },
  kvType: {
    env: "PARLEY_KV_TYPE",
    doc: "the type of the KV cache's keys and values, as llama-server's `-ctk`/`-ctv`: `f16`, `q8_0` (about half the memory a sequence takes) or `q4_0` (about a third). A quantized cache needs flash attention (`PARLEY_FLASH_ATTENTION` `auto` or `on`); saved KV states are kept per type, so a change evaluates conversations afresh once",
    shownDefault: "`f16`",
    flag: "--kv-type",
    default: "f16",
    help: "KV cache type: f16 (the default), q8_0 or q4_0 (less memory a sequence; needs flash attention)",
  },
  contextOverflow: {
    env: "PARLEY_CONTEXT_OVERFLOW",
    doc: "a conversation whose history outgrows the context: `shift` (its dropped oldest turns' cached cells are removed and the rest shifted down, as llama.cpp's context shift does: a turn past the context costs about what one before it did, but the kept turns' cache was computed with the dropped ones before them, so a reply can differ from a fresh evaluation of the same window), `slack` (the window is cut to leave room, `PARLEY_CONTEXT_SLACK_PERCENT`, and evaluated afresh, then kept while the turns after it fit: exact, each cut paying for the whole shorter window) or `exact` (the fewest oldest turns are dropped and the window evaluated afresh every turn, as a new server would). Models whose cache cannot shift (recurrent, sliding-window) use `exact` for `shift`",
    shownDefault: "`shift`",
    flag: "--context-overflow",
    default: "shift",
    help: "Past the context: shift (drop the oldest turns' cached cells and shift the rest; the measured default), slack (cut the window to leave room, exactly) or exact (re-evaluate the window every turn)",
  },
  contextSlackPercent: {
    env: "PARLEY_CONTEXT_SLACK_PERCENT",
    doc: "with `PARLEY_CONTEXT_OVERFLOW=slack`, the share of the prompt's room a cut frees for the turns after it, in percent: the more, the rarer the cuts, and the shorter the window they leave",
    shownDefault: "`50`",
    flag: "--context-slack-percent",
    default: "50",
    help: "Slack overflow: the share of the prompt's room a cut frees, in percent, 10 to 90",
  },
  promptEnds: {
    env: "PARLEY_PROMPT_ENDS",
    doc: "prompts ready at once (turns that arrive together): `shortest` evaluates their ends one a batch, shortest first, so the first replies start sooner (the sum of their times to first token falls; the last reply ends no later) and pause while the later prompts are evaluated; `together` evaluates them in one batch, as llama-server does, so every new reply gets its first token once all are evaluated and then all stream evenly; `auto` is `together` where every layer runs on a GPU (a batch there costs about one read of the weights whatever its tokens, so one batch for all the ends is sooner for every reply) and `shortest` elsewhere (`bun run bench perf --only B8,B11` measures both sides of it)",
    shownDefault: "`auto`",
    flag: "--prompt-ends",
    default: "auto",
    help: "Prompts ready at once: shortest (one a batch, shortest first: sooner first tokens), together (one batch, even streams) or auto (together where every layer is on a GPU, else shortest; the default)",
  },
  speculate: {
    env: "PARLEY_SPECULATE",
    doc: "speculative decoding: a reply's steps also verify tokens guessed from its own sequence (where its last tokens occurred before in its prompt or reply, what followed them), so a reply that quotes its context (code being edited, a document, its own repeats) takes several tokens a step; the reply is the one it would be without, except where its two most likely next tokens are tied within llama.cpp's rounding (under 0.001 apart in log-probability), which a batch of several tokens may order the other way (`docs/performance.md`). `auto` drafts where it pays (the draft length weighs how often the replies' guesses have been right against what verifying them costs in a batch that size); `lookup` drafts at least a token in every step with a guess; `draft` drafts at least a token a step from `PARLEY_DRAFT_MODEL` (which `auto` uses too when set); `off` never drafts",
    shownDefault: "`auto`",
    flag: "--speculate",
    default: "auto",
    help: "Speculative decoding: auto (where it pays; the default), lookup (every step with a guess), draft (a draft model's guesses) or off",
  },
  draftModel: {
    env: "PARLEY_DRAFT_MODEL",
    doc: "a GGUF file of a smaller model with the same vocabulary (e.g. a 0.5 B model for a 7 B one of its family) whose greedy guesses replies verify in place of guesses from their own tokens, with `PARLEY_SPECULATE` `auto` or `draft`: each step asks it for as many tokens as pay at its replies' acceptance (a draft model's step costs its size's share of the served model's). Loaded beside each served model: one of another vocabulary fails to load with `draft`, and drafts from its own tokens with `auto` (a warning says so)",
    shownDefault: "—",
    flag: "--draft-model",
    default: "",
    help: "GGUF file of a smaller model of the same vocabulary whose guesses replies verify (PARLEY_SPECULATE auto or draft)",
  },
  reasoning: {
    env: "PARLEY_REASONING",
    doc: "a reasoning model's thought (`<think>…</think>` and the like): `separate` returns, streams and stores it apart from the answer (`reasoning`, `reasoning_content`); `hide` discards it (neither shown nor stored); `inline` leaves it in the answer's text as generated",
    shownDefault: "`separate`",
    flag: "--reasoning",
    default: "separate",
    help: "A reasoning model's thought (<think>…</think>): separate (returned, streamed and stored apart from the answer), hide (discarded: neither returned nor stored), or inline (left in the answer as generated)",
  },
  buildNatives: {
    env: "PARLEY_BUILD_NATIVES",
    doc: "from a checkout whose compiled natives are not built (`bun run natives`; the executable always carries its own): `auto` serves at once on node-llama-cpp's npm prebuilt (no pictures, log-probabilities, speculation or KV memory tier), builds Parley's natives in the background at idle priority (`SCHED_IDLE` and `nice 19`, held while replies run; progress in the log and on `/healthz`), then restarts the server onto them at a moment no reply runs (`docs/operations.md`, Natives); `off` serves on the prebuilt until `bun run natives` is run; any other value is the shell command that builds them instead of `bun run natives`. Where the machine cannot compile (no cmake or C++ compiler) one line says what to install",
    shownDefault: "`auto`",
    flag: "--build-natives",
    default: "auto",
    help: "From a checkout without compiled natives: auto (build them in the background and restart onto them; the default), off, or the command that builds them",
  },
} satisfies Record<keyof Config, Spec>;

/** Flags that stand alone; every other `--flag` takes a value. */
const SWITCHES = new Set(["--admin", "--default", "--help", "--version"]);

export interface Argv {
  flags: Map<string, string>;
  positionals: string[];
}

/** `--name value`, `--name=value` and bare switches; everything else is positional. */
export function parseArgv(argv: readonly string[]): Argv {
  const flags = new Map<string, string>();
  const positionals: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const eq = arg.indexOf("=");
    if (!arg.startsWith("--")) positionals.push(arg);
    else if (eq > 0) flags.set(arg.slice(0, eq), arg.slice(eq + 1));
    else if (SWITCHES.has(arg)) flags.set(arg, "true");
    else flags.set(arg, argv[++i] ?? "");
  }
  return { flags, positionals };
}

export function loadConfig(env: Env = Bun.env, flags: ReadonlyMap<string, string> = new Map()): Config {
  const raw = (key: keyof Config): { value: string; name: string } => {
    const spec: Spec = CONFIG_SPEC[key];
    const fromFlag = flags.get(spec.flag);
    if (fromFlag !== undefined) return { value: fromFlag, name: spec.flag };
    const fromEnv = env[spec.env];
    if (fromEnv !== undefined && fromEnv !== "") return { value: fromEnv, name: spec.env };
    return { value: spec.default, name: spec.env };
  };
  const int = (key: keyof Config, min: number, max: number): number => {
    const { value, name } = raw(key);
    const n = Number(value);
    if (!/^-?\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || n < min || n > max) {
      throw new ConfigError(`${name} must be an integer from ${min} to ${max} (got "${value}")`);
    }
    return n;
  };
  const optionalInt = (key: keyof Config, min: number, max: number): number | undefined => (raw(key).value === "" ? undefined : int(key, min, max));
  const text = (key: keyof Config): string | undefined => raw(key).value || undefined;
  const bool = (key: keyof Config): boolean => {
    const { value, name } = raw(key);
    if (/^(1|true|yes|on)$/i.test(value)) return true;
    if (/^(0|false|no|off)$/i.test(value)) return false;
    throw new ConfigError(`${name} must be true or false (got "${value}")`);
  };

  const oneOf = <T extends string>(key: keyof Config, allowed: readonly T[]): T => {
    const { value, name } = raw(key);
    if (!(allowed as readonly string[]).includes(value)) throw new ConfigError(`${name} must be one of ${allowed.join(", ")} (got "${value}")`);
    return value as T;
  };

  const list = (key: keyof Config): string[] =>
    raw(key)
      .value.split(",")
      .map((item) => item.trim())
      .filter(Boolean);
  const hosts = (key: keyof Config): string[] => {
    const { name } = raw(key);
    const given = list(key).map((host) => host.toLowerCase());
    const bad = given.find((host) => !/^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$|^\[[0-9a-f:]+\]$/.test(host));
    if (bad !== undefined) throw new ConfigError(`${name} must list host names like images.example.com, comma-separated (got "${bad}")`);
    return given;
  };
  const origins = (key: keyof Config): string[] => {
    const { name } = raw(key);
    const given = list(key);
    const bad = given.find((origin) => origin !== "*" && !/^https?:\/\/[A-Za-z0-9.-]+(:\d{1,5})?$/.test(origin));
    if (bad !== undefined) throw new ConfigError(`${name} must list origins like https://app.example.com (or *), comma-separated (got "${bad}")`);
    return given;
  };
  const aliases = (key: keyof Config): Record<string, string> => {
    const { name } = raw(key);
    const pairs = list(key).map((pair) => pair.split("="));
    const bad = pairs.find((pair) => pair.length !== 2 || pair[0]!.trim() === "" || pair[1]!.trim() === "");
    if (bad !== undefined) throw new ConfigError(`${name} must be name=id pairs, comma-separated (got "${bad.join("=")}")`);
    return Object.fromEntries(pairs.map(([alias, id]) => [alias!.trim(), id!.trim()]));
  };

  const adminKey = text("adminKey");
  if (adminKey !== undefined && !/^[A-Za-z0-9._~+/=-]{24,256}$/.test(adminKey)) {
    throw new ConfigError(`${raw("adminKey").name} must be 24 to 256 characters of A-Z a-z 0-9 . _ ~ + / = - (a bearer token)`);
  }
  const dbPath = raw("dbPath").value;
  const dataDir = text("dataDir");
  if (dataDir !== undefined && (dataDir.trim() === "" || statSync(dataDir, { throwIfNoEntry: false })?.isDirectory() === false)) {
    throw new ConfigError(`${raw("dataDir").name} must name a directory, existing or to be created (got "${dataDir}")`);
  }
  const systemPrompt = promptText(raw("systemPrompt"));
  const host = raw("host").value.trim();
  if (host === "") throw new ConfigError(`${raw("host").name} must not be empty`);
  const flashAttention = oneOf("flashAttention", FLASH_ATTENTION_MODES);
  const kvType = oneOf("kvType", KV_TYPES);
  const speculate = oneOf("speculate", SPECULATE_MODES);
  const draftModel = raw("draftModel").value;
  if (speculate === "draft" && draftModel === "") throw new ConfigError(`${raw("speculate").name}=draft needs a draft model: set ${raw("draftModel").name}`);
  if (draftModel !== "" && (speculate === "lookup" || speculate === "off")) {
    throw new ConfigError(`${raw("draftModel").name} drafts only with ${raw("speculate").name} auto or draft (it is ${speculate})`);
  }
  const gpu = gpuBackend(raw("gpu"));
  const gpuLayers = optionalInt("gpuLayers", 0, 10_000);
  if (gpuLayers !== undefined && gpu === false) throw new ConfigError(`${raw("gpuLayers").name} offloads layers to a GPU: set ${raw("gpu").name}=cuda too`);
  // llama.cpp quantizes the V cache only with flash attention: a context without it would fail to load.
  if (kvType !== "f16" && flashAttention === "off") {
    throw new ConfigError(
      `${raw("kvType").name}=${kvType} quantizes the cache's values, which llama.cpp runs only with flash attention: set ${raw("flashAttention").name} to auto or on, or ${raw("kvType").name} to f16`,
    );
  }

  return {
    host,
    port: int("port", 0, 65535),
    dbPath,
    dbPool: int("dbPool", 1, 1_000),
    dbTimeoutMs: int("dbTimeoutMs", 100, 600_000),
    dbWaitS: int("dbWaitS", 0, 86_400),
    leaseTtlS: int("leaseTtlS", 1, 3_600),
    responsesTtlDays: int("responsesTtlDays", 0, 36_500),
    nodeName: nodeName(raw("nodeName")),
    dataDir: dataDir ?? (isPostgresUrl(dbPath) ? "./data" : dirname(dbPath)),
    adminKey,
    modelPaths: list("modelPaths"),
    modelsDir: raw("modelsDir").value,
    modelAliases: aliases("modelAliases"),
    maxLoadedModels: int("maxLoadedModels", 1, 64),
    keepAliveS: int("keepAliveS", -1, 30 * 86_400),
    parallel: int("parallel", 1, 64),
    contextSize: optionalInt("contextSize", 64, 1 << 20),
    threads: optionalInt("threads", 1, 1024),
    gpu,
    gpuLayers,
    queueMax: int("queueMax", 0, 100_000),
    bodyLimitBytes: int("bodyLimitBytes", 1024, 64 << 20),
    pictureBodyLimitBytes: int("pictureBodyLimitBytes", 1024, 256 << 20),
    pictureHosts: hosts("pictureHosts"),
    mcpServers: mcpServers(raw("mcpServers"), env),
    bodyTimeoutS: int("bodyTimeoutS", 1, 3_600),
    heartbeatMs: int("heartbeatMs", 100, 15_000),
    logLevel: oneOf("logLevel", LOG_LEVELS),
    rateLimit: int("rateLimit", 0, 1_000_000),
    maxStreamsPerKey: int("maxStreamsPerKey", 1, 10_000),
    generationTimeoutS: int("generationTimeoutS", 0, 86_400),
    shutdownGraceS: int("shutdownGraceS", 0, 3_600),
    metricsPublic: bool("metricsPublic"),
    corsOrigins: origins("corsOrigins"),
    kvCacheMb: int("kvCacheMb", 0, 1 << 24),
    kvRamMb: int("kvRamMb", 0, 1 << 24),
    systemPrompt,
    reasoning: oneOf("reasoning", REASONING_MODES),
    batchSize: optionalInt("batchSize", 16, 8192),
    flashAttention,
    kvType,
    contextOverflow: oneOf("contextOverflow", CONTEXT_OVERFLOW_MODES),
    contextSlackPercent: int("contextSlackPercent", 10, 90),
    promptEnds: oneOf("promptEnds", PROMPT_ENDS_MODES),
    speculate,
    draftModel: draftModel === "" ? undefined : draftModel,
    buildNatives: raw("buildNatives").value,
  };
}

/** `true` names the one backend there is, so that a later second one does not change its meaning. */
function gpuBackend({ value, name }: { value: string; name: string }): GpuBackend | false {
  if (/^(1|true|yes|on|cuda)$/i.test(value)) return "cuda";
  if (/^(0|false|no|off)$/i.test(value)) return false;
  throw new ConfigError(`${name} must be cuda, true or false (got "${value}")`);
}

function mcpServers({ value, name }: { value: string; name: string }, env: Env): McpServerSpec[] {
  try {
    return parseMcpServers(value, env);
  } catch (error) {
    throw new ConfigError(`${name} ${(error as Error).message}`);
  }
}

/** A node's name goes into a response header: printable ASCII, no more than a line's worth. */
function nodeName({ value, name }: { value: string; name: string }): string | undefined {
  if (value === "") return undefined;
  if (!/^[\x21-\x7e]{1,128}$/.test(value)) throw new ConfigError(`${name} must be 1 to 128 printable ASCII characters without spaces (got "${value}")`);
  return value;
}

/** `@path` names a file read now, so a missing one stops start-up rather than the first turn. */
function promptText({ value, name }: { value: string; name: string }): string | undefined {
  if (!value.startsWith("@")) return value.trim() || undefined;
  const path = value.slice(1);
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (error) {
    throw new ConfigError(`${name} names a file that cannot be read: ${path} (${(error as NodeJS.ErrnoException).code ?? "error"})`);
  }
  if (text.trim() === "") throw new ConfigError(`${name} names an empty file: ${path}`);
  return text.trim();
}
