/**
 * What a PostgreSQL outage looks like to the rest of Parley: a temporarily unavailable service.
 * Every storage call runs under one deadline; a call that fails because the database cannot be
 * reached (refused, restarting, its connection killed) or does not answer in time becomes
 * `Overloaded` with a Retry-After, answered 503 and never 500, and never a hang. A call that is
 * safe to repeat (a read, or a write whose second run changes nothing) is tried again within the
 * deadline first: postgres.js replaces a dead connection with a new one, so connections killed
 * under the pool cost the caller nothing.
 */
import { Overloaded } from "../../errors";
import { wrapMethods } from "../wrap-methods";

/** Clients are told to come back after this: a restart takes seconds. */
const RETRY_AFTER_MS = 2_000;
/** Between two attempts of a repeatable call: the first at once after a lost connection, nearly. */
const FIRST_PAUSE_MS = 5;
const LONGEST_PAUSE_MS = 200;

/** postgres.js's codes for a connection that could not be made or was lost. */
const CONNECTION_CODES = new Set(["ECONNREFUSED", "ECONNRESET", "ENOENT", "EPIPE", "ETIMEDOUT", "CONNECT_TIMEOUT", "CONNECTION_CLOSED", "CONNECTION_ENDED", "CONNECTION_DESTROYED"]);

/**
 * SQLSTATEs of a server going away or not taking connections: class 08 (connection exception),
 * 57P01-57P03 (admin shutdown, crash shutdown, cannot connect now: also `pg_terminate_backend`),
 * 53300 (too many connections).
 */
const unreachableState = (state: string): boolean => state.startsWith("08") || ["57P01", "57P02", "57P03", "53300"].includes(state);

/** The call did not answer within the deadline. */
class DatabaseTimeout extends Error {
  constructor(ms: number) {
    super(`the database did not answer within ${ms} ms`);
  }
}

/**
 * Whether `error` says the database could not be reached, rather than that the query was wrong.
 * drizzle wraps the driver's error (`DrizzleQueryError`) as its `cause`.
 */
export function isDatabaseUnreachable(error: unknown): boolean {
  for (let depth = 0; error instanceof Error && depth < 4; depth++, error = error.cause) {
    if (error instanceof DatabaseTimeout) return true;
    const code = (error as { code?: unknown }).code;
    if (typeof code === "string" && (CONNECTION_CODES.has(code) || (/^[0-9A-Z]{5}$/.test(code) && unreachableState(code)))) return true;
  }
  return false;
}

export class OutageGuard {
  constructor(private readonly timeoutMs: number) {}

  /**
   * `call` under the deadline; a `repeatable` call that could not reach the database is made again
   * (after a short pause, growing) until it succeeds or the deadline passes: each dead connection
   * of the pool (after a failover, several at once) costs one attempt, and postgres.js opens a new
   * one. Unreachable becomes `Overloaded`; any other error passes through.
   */
  async run<T>(call: () => Promise<T>, repeatable: boolean): Promise<T> {
    const deadline = Date.now() + this.timeoutMs;
    for (let pause = FIRST_PAUSE_MS; ; pause = Math.min(pause * 2, LONGEST_PAUSE_MS)) {
      try {
        return await this.within(call, deadline);
      } catch (error) {
        if (!isDatabaseUnreachable(error)) throw error;
        if (!repeatable || error instanceof DatabaseTimeout || Date.now() + pause >= deadline) throw unavailable(error);
        await Bun.sleep(pause);
      }
    }
  }

  /**
   * `store` with every method run through `run`: those named in `repeatable` may be repeated.
   * The store's own fields stay as they are.
   */
  guard<S extends object>(store: S, repeatable: readonly (keyof S)[]): S {
    return wrapMethods(store, (name, call) => this.run(call as () => Promise<unknown>, repeatable.includes(name as keyof S)));
  }

  private async within<T>(call: () => Promise<T>, deadline: number): Promise<T> {
    const ms = Math.max(0, deadline - Date.now());
    let timer: Timer | undefined;
    const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new DatabaseTimeout(this.timeoutMs)), ms)));
    try {
      return await Promise.race([call(), late]);
    } finally {
      clearTimeout(timer);
    }
  }
}

function unavailable(cause: unknown): Overloaded {
  const error = new Overloaded("the database cannot be reached; try again shortly", RETRY_AFTER_MS);
  error.cause = cause;
  return error;
}
