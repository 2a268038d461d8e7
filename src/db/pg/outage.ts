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
/** Between two attempts of a repeatable call when the server could not be reached: growing. */
const FIRST_PAUSE_MS = 5;
const LONGEST_PAUSE_MS = 200;
/**
 * One attempt of a repeatable call may take this share of the deadline: a query sent on a
 * connection whose death the pool has not noticed yet may wait for no answer, and the next
 * attempt, on another connection, would answer.
 */
const ATTEMPT_SHARE = 1 / 3;

/** postgres.js's codes for a connection that was lost: the next attempt takes another, or a new one. */
const LOST_CODES = new Set(["ECONNRESET", "EPIPE", "CONNECTION_CLOSED", "CONNECTION_ENDED", "CONNECTION_DESTROYED"]);
/** postgres.js's codes for a connection that could not be made: the server is away. */
const UNREACHABLE_CODES = new Set(["ECONNREFUSED", "ENOENT", "ETIMEDOUT", "CONNECT_TIMEOUT"]);

/**
 * SQLSTATEs of a server going away or not taking connections: 57P01 (admin shutdown: also
 * `pg_terminate_backend`, a connection lost) and class 08 (connection exception), 57P02-57P03
 * (crash shutdown, cannot connect now), 53300 (too many connections).
 */
const LOST_STATES = new Set(["57P01"]);
const unreachableState = (state: string): boolean => state.startsWith("08") || ["57P02", "57P03", "53300"].includes(state);

type Failure = "lost" | "unreachable" | undefined;

/** What `error` says of the database: a connection lost, the server unreachable, or neither (the query was wrong). */
function failureOf(error: unknown): Failure {
  for (let depth = 0; error instanceof Error && depth < 4; depth++, error = error.cause) {
    if (error instanceof DatabaseTimeout) return "lost";
    const code = (error as { code?: unknown }).code;
    if (typeof code !== "string") continue;
    if (LOST_CODES.has(code) || LOST_STATES.has(code)) return "lost";
    if (UNREACHABLE_CODES.has(code) || (/^[0-9A-Z]{5}$/.test(code) && unreachableState(code))) return "unreachable";
  }
  return undefined;
}

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
export const isDatabaseUnreachable = (error: unknown): boolean => failureOf(error) !== undefined;

export class OutageGuard {
  constructor(private readonly timeoutMs: number) {}

  /**
   * `call` under the deadline; a `repeatable` call that could not reach the database is made again
   * until it succeeds or the deadline passes: at once after a lost connection (each dead
   * connection of the pool, several after a failover, costs one attempt, and postgres.js opens a
   * new one), after a short pause, growing, while the server is away. Its attempts have a share of
   * the deadline each. Unreachable becomes `Overloaded`; any other error passes through.
   */
  async run<T>(call: () => Promise<T>, repeatable: boolean): Promise<T> {
    const deadline = Date.now() + this.timeoutMs;
    const attemptMs = repeatable ? Math.max(100, this.timeoutMs * ATTEMPT_SHARE) : this.timeoutMs;
    for (let pause = FIRST_PAUSE_MS; ; ) {
      try {
        return await this.within(call, Math.min(deadline, Date.now() + attemptMs));
      } catch (error) {
        const failure = failureOf(error);
        if (failure === undefined) throw error;
        const wait = failure === "lost" ? 0 : pause;
        if (!repeatable || Date.now() + wait >= deadline) throw unavailable(error);
        if (wait > 0) {
          await Bun.sleep(wait);
          pause = Math.min(pause * 2, LONGEST_PAUSE_MS);
        }
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
    const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new DatabaseTimeout(ms)), ms)));
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
