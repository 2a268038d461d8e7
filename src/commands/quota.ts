import { QuotaAdmin, type QuotaListing, type QuotaSubject } from "../chat/quota-admin";
import { TokenLedger } from "../chat/token-ledger";
import type { Config } from "../config";
import { QUOTA_PERIODS, type QuotaPeriod } from "../db/types";
import { NotFound, Overloaded } from "../errors";
import { openConfiguredStorage } from "../startup";

const USAGE = `usage: parley quota set (--user <name> | --default) --tokens <n> --period day|month
       parley quota clear (--user <name> | --default)
       parley quota list`;

async function withAdmin<T>(config: Config, work: (admin: QuotaAdmin) => Promise<T>): Promise<T> {
  await using storage = await openConfiguredStorage(config.dbPath, { poolSize: 1 });
  return await work(new QuotaAdmin(storage.keys, storage.quotas, new TokenLedger(storage.usage, storage.quotas)));
}

const shown = (value: number | undefined) => (value === undefined ? "-" : String(value));

function line(entry: QuotaListing): string {
  return [entry.user ?? "(default)", entry.tokens, entry.period, shown(entry.used), shown(entry.remaining), new Date(entry.resetsAt).toISOString()].join("\t");
}

/** `--user <name>`, or `--default`; undefined when neither or both were given. */
function subjectOf(flags: Map<string, string>): QuotaSubject | undefined {
  const user = flags.get("--user");
  if ((user === undefined) === !flags.has("--default")) return undefined;
  return user === undefined ? null : { name: user };
}

/** `parley quota set|clear|list`; returns the process exit code. */
export async function quotaCommand(config: Config, args: readonly string[], flags: Map<string, string>): Promise<number> {
  try {
    return await run(config, args, flags);
  } catch (error) {
    if (!(error instanceof NotFound) && !(error instanceof Overloaded)) throw error;
    console.error(`parley: ${error.message}`);
    return 1;
  }
}

async function run(config: Config, args: readonly string[], flags: Map<string, string>): Promise<number> {
  const subject = subjectOf(flags);
  switch (args[0]) {
    case "set": {
      const tokens = Number(flags.get("--tokens"));
      const period = flags.get("--period") as QuotaPeriod | undefined;
      if (subject === undefined || !Number.isSafeInteger(tokens) || tokens < 0 || !QUOTA_PERIODS.includes(period!)) {
        console.error(`${USAGE}\n(--tokens: an integer from 0; --period: ${QUOTA_PERIODS.join(" or ")})`);
        return 2;
      }
      const entry = await withAdmin(config, (admin) => admin.set(subject, { tokens, period: period! }));
      console.log(`${entry.user === null ? "The default quota" : `User "${entry.user}"'s quota`} is ${tokens} tokens a ${period}.`);
      return 0;
    }
    case "clear": {
      if (subject === undefined) {
        console.error(USAGE);
        return 2;
      }
      await withAdmin(config, (admin) => admin.clear(subject));
      console.log(
        subject === null ? "The default quota is cleared: users without their own have no limit." : `User "${flags.get("--user")}"'s own quota is cleared.`,
      );
      return 0;
    }
    case "list": {
      const entries = await withAdmin(config, (admin) => admin.list());
      console.log(["user", "limit", "period", "used", "remaining", "resets_at"].join("\t"));
      for (const entry of entries) console.log(line(entry));
      return 0;
    }
    default:
      console.error(USAGE);
      return 2;
  }
}
