/**
 * What an operator does with quotas, from the command line or the admin API alike: list them
 * with each user's standing, set one (a user's or the default), clear one.
 */
import type { KeyStore, QuotaEntry, QuotaRule, QuotaStore } from "../db/storage";
import { NotFound } from "../errors";
import { periodOf, type TokenLedger } from "./token-ledger";

/** A user by id (the API's way) or by name (the command line's); null: the default quota. */
export type QuotaSubject = { id: number } | { name: string } | null;

/** A configured quota and, for a user's, their standing this period. */
export interface QuotaListing extends QuotaEntry {
  /** Undefined for the default: it is every such user's own. */
  used?: number;
  remaining?: number;
  resetsAt: number;
}

export class QuotaAdmin {
  constructor(
    private readonly keys: Pick<KeyStore, "list">,
    private readonly quotas: QuotaStore,
    private readonly ledger: TokenLedger,
  ) {}

  /** The default first, then users' quotas by user id. */
  async list(): Promise<QuotaListing[]> {
    return Promise.all((await this.quotas.list()).map((entry) => this.listing(entry)));
  }

  /** `NotFound` for a user who does not exist. */
  async set(subject: QuotaSubject, rule: QuotaRule): Promise<QuotaListing> {
    const user = await this.user(subject);
    await this.quotas.set(user?.id ?? null, rule);
    return this.listing({ userId: user?.id ?? null, user: user?.name ?? null, ...rule });
  }

  /** `NotFound` when there was none. */
  async clear(subject: QuotaSubject): Promise<void> {
    const user = await this.user(subject);
    if (!(await this.quotas.clear(user?.id ?? null)))
      throw new NotFound(user ? `user ${JSON.stringify(user.name)} has no quota of their own` : "there is no default quota");
  }

  private async listing(entry: QuotaEntry): Promise<QuotaListing> {
    if (entry.userId === null) return { ...entry, resetsAt: periodOf(entry.period, this.ledger.now()).resetsAt };
    const state = await this.ledger.standingOf(entry.userId, entry);
    return { ...entry, used: state.used, remaining: state.remaining, resetsAt: state.resetsAt };
  }

  private async user(subject: QuotaSubject): Promise<{ id: number; name: string } | undefined> {
    if (subject === null) return undefined;
    // Users have keys: a user is known by their keys' listing, which is short (an operator's).
    const found = (await this.keys.list()).find((key) => ("id" in subject ? key.userId === subject.id : key.user === subject.name));
    if (!found) throw new NotFound(`no user ${"id" in subject ? subject.id : JSON.stringify(subject.name)}`);
    return { id: found.userId, name: found.user };
  }
}
