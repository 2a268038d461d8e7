/**
 * A real PostgreSQL for tests and benchmarks: one server per process, started on first use with
 * `initdb` into a temp directory (as the `postgres` user when run as root: PostgreSQL refuses
 * root), listening only on a unix socket there; each caller gets a fresh database in it.
 */
import { chownSync, existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { atEndOfRun } from "./end-of-run";
import { tempDir } from "./files";

const PG_ROOT = "/usr/lib/postgresql";

/** The newest installed PostgreSQL's bin directory, if any. */
function findBinDir(): string | undefined {
  if (!existsSync(PG_ROOT)) return undefined;
  const versions = readdirSync(PG_ROOT)
    .filter((v) => existsSync(join(PG_ROOT, v, "bin", "initdb")))
    .sort((a, b) => Number(b) - Number(a));
  return versions[0] === undefined ? undefined : join(PG_ROOT, versions[0], "bin");
}

export const PG_BIN = findBinDir();

/**
 * Why PostgreSQL tests cannot run here, or undefined when they can. Under CI they must run, so
 * a missing server is an error there rather than a skip.
 */
export function postgresMissing(): string | undefined {
  if (PG_BIN !== undefined) return undefined;
  const reason = `PostgreSQL not found under ${PG_ROOT} (apt-get install postgresql)`;
  if (Bun.env.CI === "true") throw new Error(`${reason}: required under CI`);
  console.warn(`skipping PostgreSQL tests: ${reason}`);
  return reason;
}

const asRoot = process.getuid?.() === 0;

/** Runs a PostgreSQL tool as `postgres` when we are root, else as ourselves. */
function runTool(tool: string, args: string[]): void {
  const argv = [join(PG_BIN!, tool), ...args];
  const result = Bun.spawnSync(asRoot ? ["runuser", "-u", "postgres", "--", ...argv] : argv, { stdout: "pipe", stderr: "pipe" });
  if (result.exitCode !== 0) throw new Error(`${tool} failed (${result.exitCode}): ${result.stderr.toString()}${result.stdout.toString()}`);
}

export interface PostgresServer {
  /** The directory holding the socket: `?host=` of a connection URL. */
  socketDir: string;
  /** A URL for `database`, as `PARLEY_DB` takes it. */
  url(database: string): string;
  /** For good (immediate shutdown, at the end of the run at the latest). */
  stop(): void;
  /** An outage: a fast shutdown (sessions ended, as on a restart) until `resume`. */
  pause(): void;
  resume(): void;
}

let shared: Promise<PostgresServer> | undefined;

/** Starts a server in a fresh directory; stopped at the end of the test run. */
export async function startPostgres(): Promise<PostgresServer> {
  if (PG_BIN === undefined) throw new Error(`PostgreSQL not found under ${PG_ROOT}`);
  const dir = tempDir("pg");
  if (asRoot) chownSync(dir, uid("postgres"), gid("postgres"));
  const data = join(dir, "data");
  runTool("initdb", ["-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8", "--locale=C"]);
  // Durability is not under test: fsync off keeps CREATE DATABASE and commits fast on a busy machine.
  const options = `-c listen_addresses='' -k ${dir} -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300`;
  const start = () => runTool("pg_ctl", ["-D", data, "-l", join(dir, "pg.log"), "-o", options, "-w", "start"]);
  start();
  let stopped = false;
  let paused = false;
  const stop = () => {
    if (stopped) return;
    stopped = true;
    if (!paused) runTool("pg_ctl", ["-D", data, "-m", "immediate", "-w", "stop"]);
  };
  atEndOfRun(stop);
  return {
    socketDir: dir,
    url: (database) => `postgres://postgres@localhost/${database}?host=${dir}`,
    stop,
    pause: () => {
      runTool("pg_ctl", ["-D", data, "-m", "fast", "-w", "stop"]);
      paused = true;
    },
    resume: () => {
      start();
      paused = false;
    },
  };
}

/** This process's server, started on first use. */
export const sharedPostgres = (): Promise<PostgresServer> => (shared ??= startPostgres());

let databases = 0;

/** A fresh, empty database on `server` (default: the shared one); resolves to its URL. */
export async function freshPostgresDb(label = "test", server?: PostgresServer): Promise<string> {
  server ??= await sharedPostgres();
  const name = `parley_${label.replace(/\W/g, "_")}_${process.pid}_${++databases}`;
  const { default: postgres } = await import("postgres");
  const admin = postgres({ host: server.socketDir, user: "postgres", database: "postgres", max: 1, onnotice: () => {} });
  try {
    await admin.unsafe(`CREATE DATABASE "${name}"`);
  } finally {
    await admin.end();
  }
  return server.url(name);
}

function idOf(flag: "-u" | "-g", name: string): number {
  return Number(Bun.spawnSync(["id", flag, name]).stdout.toString().trim());
}
const uid = (name: string) => idOf("-u", name);
const gid = (name: string) => idOf("-g", name);
