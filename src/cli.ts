#!/usr/bin/env bun
import pkg from "../package.json";
import { CONFIG_SPEC, type Config, loadConfig, parseArgv, Refusal } from "./config";

const NAMES = Object.values(CONFIG_SPEC).map((spec) => `${spec.flag} / ${spec.env}`);
/** Wide enough for the longest name and two spaces, so no name runs into its help. */
const NAME_WIDTH = NAMES.reduce((widest, name) => Math.max(widest, name.length), 0) + 2;
const OPTIONS = Object.values(CONFIG_SPEC)
  .map((spec, i) => `  ${NAMES[i]!.padEnd(NAME_WIDTH)}${spec.help}${spec.default ? ` (default ${spec.default})` : ""}`)
  .join("\n");

const EXIT_CODES = "Exit codes: 0 success, 1 failure, 2 usage or configuration error.";

interface Command {
  summary: string;
  /** Undefined when the command explains its own subcommands (`--help` is passed on to it). */
  help?: string;
  /** Imported only when run: loading the engine or the HTTP stack costs ~0.5 s a command need not pay. */
  run(config: Config, args: string[], flags: Map<string, string>): Promise<number>;
}

const COMMANDS: Record<string, Command> = {
  serve: {
    summary: "parley serve [options]                      start the HTTP service",
    help: `Usage: parley serve [options]

Starts the HTTP service. It listens at once, logs one "listening" line (URL, model, parallelism,
database), and answers chats once the model is loaded (GET /readyz turns 200). SIGTERM or SIGINT
stops it gracefully; a second signal stops it at once.

Options (flags override environment variables):
${OPTIONS}

${EXIT_CODES}`,
    run: async (config) => (await import("./commands/serve")).serveCommand(config),
  },
  keys: {
    summary: `parley keys create --user <name> [--admin]  issue an API key (printed once)
  parley keys list                            list keys (never the keys themselves)
  parley keys revoke <id>                     revoke a key`,
    help: `Usage:
  parley keys create --user <name> [--admin]  issue a key for the user (created if new); the key is
                                              printed once, alone on the last line of stdout
  parley keys list                            id, user, user_id, role, prefix, created, last_used, revoked
  parley keys revoke <id>                     the key is refused from then on

Keys live in the database (--db / PARLEY_DB), stored only as a hash.

${EXIT_CODES}`,
    run: async (config, args, flags) => (await import("./commands/keys")).keysCommand(config, args, flags),
  },
  quota: {
    summary: `parley quota set (--user <name> | --default) --tokens <n> --period day|month
                                              a user's token budget, or every other user's
  parley quota clear (--user <name> | --default)
  parley quota list                           quotas, with each user's tokens used this period`,
    help: `Usage:
  parley quota set --user <name> --tokens <n> --period day|month
                                              the user may use n tokens (prompt and completion) per
                                              UTC day or month; replies stop where it ends, then 429
  parley quota set --default --tokens <n> --period day|month
                                              the same for every user without a quota of their own
  parley quota clear --user <name>            the default applies to the user again
  parley quota clear --default                users without their own quota have no limit
  parley quota list                           user, limit, period, used, remaining, resets_at

No quota at all means no limit. Quotas live in the database (--db / PARLEY_DB): every node sharing
it applies them at once. The admin API does the same: /api/v1.0/admin/quotas (docs/API.md).

${EXIT_CODES}`,
    run: async (config, args, flags) => (await import("./commands/quota")).quotaCommand(config, args, flags),
  },
  model: {
    summary: `parley model list                           GGUF files in the models directory
  parley model embedded                       the models this executable carries, with their sha256
  parley model info <file>                    what a GGUF file's header says (exit 1 if unusable)
  parley model pull <url | hf-uri> [--out <dir | file>]
                                              download a model (needs a network), resumable
  parley model demo [--preset <name>] [--type f16|q8_0|q4_0] [--out <file>]
                                              write a model Parley generates itself (presets: model demo --help)
  parley model <command> --help               details of a model command`,
    run: async (config, args, flags) => (await import("./commands/model")).modelCommand(config, args, flags),
  },
};

const HELP = `Parley ${pkg.version}: a chat service answering from a local GGUF model.

Usage:
${Object.values(COMMANDS)
  .map((command) => `  ${command.summary}`)
  .join("\n")}
  parley <command> --help                     details of a command
  parley --help | --version

Options (flags override environment variables):
${OPTIONS}

${EXIT_CODES}
`;

const KNOWN_FLAGS = new Set([
  ...Object.values(CONFIG_SPEC).map((spec) => spec.flag),
  ...["--admin", "--user", "--default", "--tokens", "--period", "--preset", "--type", "--out", "--help", "--version"],
]);

async function main(argv: readonly string[]): Promise<number> {
  const { flags, positionals } = parseArgv(argv);
  const [name, ...rest] = positionals;
  if (flags.has("--version")) {
    console.log(await (await import("./version")).versionText());
    return 0;
  }
  const command = name === undefined ? undefined : COMMANDS[name];
  if (command === undefined) {
    if (name === "help" || (name === undefined && flags.has("--help"))) {
      console.log(HELP);
      return 0;
    }
    console.error(name === undefined ? HELP : `unknown command "${name}"\n\n${HELP}`);
    return 2;
  }
  if (flags.has("--help") && command.help !== undefined) {
    console.log(command.help);
    return 0;
  }
  const unknown = [...flags.keys()].filter((flag) => !KNOWN_FLAGS.has(flag));
  if (unknown.length > 0) {
    console.error(`unknown option ${unknown.join(", ")} (see parley ${name} --help)`);
    return 2;
  }
  return command.run(loadConfig(Bun.env, flags), rest, flags);
}

try {
  process.exitCode = await main(Bun.argv.slice(2));
} catch (error) {
  if (!(error instanceof Refusal)) throw error;
  console.error(`parley: ${error.message}`);
  process.exitCode = error.exitCode;
}
