import type { Config } from "../config";
import type { KeyStore } from "../db/storage";
import { Overloaded } from "../errors";
import { openConfiguredStorage } from "../startup";

const USER_NAME = /^[A-Za-z0-9._@-]{1,64}$/;

const iso = (ms: number | null) => (ms === null ? "-" : new Date(ms).toISOString());

async function withKeys<T>(config: Config, work: (keys: KeyStore) => Promise<T>): Promise<T> {
  await using storage = await openConfiguredStorage(config.dbPath, { poolSize: 1 });
  return await work(storage.keys);
}

/** `parley keys create|list|revoke`; returns the process exit code. */
export async function keysCommand(config: Config, args: readonly string[], flags: Map<string, string>): Promise<number> {
  try {
    return await run(config, args, flags);
  } catch (error) {
    // A database another process keeps locked (a long backup, say) is the operator's to retry.
    if (!(error instanceof Overloaded)) throw error;
    console.error(`parley: ${error.message}`);
    return 1;
  }
}

async function run(config: Config, args: readonly string[], flags: Map<string, string>): Promise<number> {
  const [action, target] = args;
  switch (action) {
    case "create": {
      const user = flags.get("--user");
      if (user === undefined || !USER_NAME.test(user)) {
        console.error("usage: parley keys create --user <name> [--admin]   (name: 1-64 of A-Z a-z 0-9 . _ @ -)");
        return 2;
      }
      const role = flags.has("--admin") ? "admin" : "user";
      const created = await withKeys(config, (keys) => keys.create(user, role));
      console.log(`Created ${role} key ${created.id} for user "${user}" (user id ${created.userId}). It is shown only now:`);
      console.log(created.key);
      return 0;
    }
    case "list": {
      const rows = await withKeys(config, (keys) => keys.list());
      console.log(["id", "user", "user_id", "role", "prefix", "created", "last_used", "revoked"].join("\t"));
      for (const row of rows) {
        console.log([row.id, row.user, row.userId, row.role, `${row.prefix}…`, iso(row.createdAt), iso(row.lastUsedAt), iso(row.revokedAt)].join("\t"));
      }
      return 0;
    }
    case "revoke": {
      const id = Number(target);
      if (target === undefined || !/^\d+$/.test(target)) {
        console.error("usage: parley keys revoke <id>   (ids are shown by `parley keys list`)");
        return 2;
      }
      if (!(await withKeys(config, (keys) => keys.revoke(id)))) {
        console.error(`no key with id ${id}`);
        return 1;
      }
      console.log(`Key ${id} is revoked.`);
      return 0;
    }
    default:
      console.error("usage: parley keys create --user <name> [--admin] | parley keys list | parley keys revoke <id>");
      return 2;
  }
}
