/**
 * The MCP servers the operator lists (`PARLEY_MCP_SERVERS`): by label, a streamable-HTTP URL or a
 * stdio command Parley starts, the headers it sends (secrets from the environment), who may use
 * it, a call's time and a result's size. Requests may name only these: the service never connects
 * where the operator did not say.
 */
import { readFileSync } from "node:fs";

export interface McpServerSpec {
  label: string;
  transport: { kind: "http"; url: string } | { kind: "stdio"; command: string; args: string[]; env: Record<string, string>; cwd?: string };
  /** Sent with every request to an HTTP server, values resolved from the environment at start. */
  headers: Record<string, string>;
  /** Who may use it: the users by name, the keys' roles; absent, every key. */
  allow?: { users: string[]; roles: string[] };
  /** How long one call may take. */
  callTimeoutMs: number;
  /** A call's result beyond this many bytes is cut (and says so). */
  maxResultBytes: number;
}

export const DEFAULT_CALL_TIMEOUT_MS = 30_000;
export const DEFAULT_MAX_RESULT_BYTES = 65_536;
const LABEL = /^[a-zA-Z0-9_-]{1,64}$/;
const ROLES = ["admin", "user"];

/**
 * `label=url,…`, or `@file` naming a JSON object of labels to `{url | command, args?, env?, cwd?,
 * headers?, users?, roles?, timeout_s?, max_result_bytes?}`. `${NAME}` in a header or env value is
 * the environment's NAME, which must be set. Throws a message naming what is wrong.
 */
export function parseMcpServers(value: string, environment: Record<string, string | undefined>): McpServerSpec[] {
  const trimmed = value.trim();
  if (trimmed === "") return [];
  const specs = trimmed.startsWith("@") ? fromFile(trimmed.slice(1), environment) : fromPairs(trimmed);
  const labels = new Set<string>();
  for (const { label } of specs) {
    if (labels.has(label)) throw new Error(`lists the label "${label}" twice`);
    labels.add(label);
  }
  return specs;
}

function fromPairs(value: string): McpServerSpec[] {
  return value.split(",").map((pair) => {
    const at = pair.indexOf("=");
    const label = pair.slice(0, at).trim();
    const url = pair.slice(at + 1).trim();
    if (at < 0 || !LABEL.test(label)) throw new Error(`must be label=url pairs, comma-separated, labels of letters, digits, _ and - (got "${pair}")`);
    return {
      label,
      transport: { kind: "http", url: httpUrl(url, label) },
      headers: {},
      callTimeoutMs: DEFAULT_CALL_TIMEOUT_MS,
      maxResultBytes: DEFAULT_MAX_RESULT_BYTES,
    };
  });
}

function httpUrl(url: string, label: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new Error(`gives server "${label}" a URL that is not one (got "${url}")`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") throw new Error(`gives server "${label}" a URL that is not http(s) (got "${url}")`);
  return parsed.href;
}

function fromFile(path: string, environment: Record<string, string | undefined>): McpServerSpec[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(path, "utf8"));
  } catch (error) {
    throw new Error(`names a file that is not readable JSON: ${path} (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
  }
  if (!isObject(parsed)) throw new Error(`names a file whose JSON is not an object of labels: ${path}`);
  return Object.entries(parsed).map(([label, entry]) => serverOf(label, entry, environment));
}

const KEYS = new Set(["url", "command", "args", "env", "cwd", "headers", "users", "roles", "timeout_s", "max_result_bytes"]);

function serverOf(label: string, entry: unknown, environment: Record<string, string | undefined>): McpServerSpec {
  const where = `server "${label}"`;
  if (!LABEL.test(label)) throw new Error(`has a label of other than letters, digits, _ and - (got "${label}")`);
  if (!isObject(entry)) throw new Error(`gives ${where} as other than an object`);
  const unknown = Object.keys(entry).find((key) => !KEYS.has(key));
  if (unknown !== undefined) throw new Error(`gives ${where} an unknown field "${unknown}" (known: ${[...KEYS].join(", ")})`);
  const { url, command, args = [], env = {}, cwd, headers = {}, users, roles, timeout_s: timeoutS = DEFAULT_CALL_TIMEOUT_MS / 1000 } = entry;
  const maxResultBytes = entry.max_result_bytes ?? DEFAULT_MAX_RESULT_BYTES;
  if ((url === undefined) === (command === undefined)) throw new Error(`gives ${where} both a url and a command, or neither: it needs one`);
  if (!isStrings(args)) throw new Error(`gives ${where} args that are not an array of strings`);
  if (cwd !== undefined && typeof cwd !== "string") throw new Error(`gives ${where} a cwd that is not a path`);
  if (typeof timeoutS !== "number" || !(timeoutS > 0 && timeoutS <= 3600)) throw new Error(`gives ${where} a timeout_s that is not from 0 to 3600 seconds`);
  if (!Number.isSafeInteger(maxResultBytes) || (maxResultBytes as number) < 256)
    throw new Error(`gives ${where} a max_result_bytes that is not an integer of at least 256`);
  if (users !== undefined && !isStrings(users)) throw new Error(`gives ${where} users that are not an array of user names`);
  if (roles !== undefined && (!isStrings(roles) || roles.some((role) => !ROLES.includes(role))))
    throw new Error(`gives ${where} roles other than "admin" and "user"`);
  const resolved = (values: unknown, what: string) => {
    if (!isObject(values) || !Object.values(values).every((v) => typeof v === "string"))
      throw new Error(`gives ${where} ${what} that are not an object of strings`);
    return Object.fromEntries(
      Object.entries(values as Record<string, string>).map(([name, text]) => [name, substituted(text, `${where}'s ${what} ${name}`, environment)]),
    );
  };
  return {
    label,
    transport:
      typeof url === "string"
        ? { kind: "http", url: httpUrl(url, label) }
        : typeof command === "string" && command !== ""
          ? { kind: "stdio", command, args, env: resolved(env, "env"), ...(cwd !== undefined ? { cwd } : {}) }
          : (() => {
              throw new Error(`gives ${where} a url or command that is not a string`);
            })(),
    headers: resolved(headers, "headers"),
    ...(users !== undefined || roles !== undefined ? { allow: { users: users ?? [], roles: roles ?? [] } } : {}),
    callTimeoutMs: timeoutS * 1000,
    maxResultBytes: maxResultBytes as number,
  };
}

/** `${NAME}` replaced by the environment's NAME, which must be set. */
function substituted(text: string, what: string, environment: Record<string, string | undefined>): string {
  return text.replaceAll(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g, (_, name: string) => {
    const value = environment[name];
    if (value === undefined) throw new Error(`takes ${what} from the environment's ${name}, which is not set`);
    return value;
  });
}

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === "object" && value !== null && !Array.isArray(value);
const isStrings = (value: unknown): value is string[] => Array.isArray(value) && value.every((item) => typeof item === "string");
