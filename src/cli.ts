#!/usr/bin/env bun
import { ConfigError, CONFIG_SPEC, loadConfig, parseArgv } from "./config";
import { keysCommand } from "./commands/keys";
import { modelCommand } from "./commands/model";
import { serveCommand } from "./commands/serve";
import pkg from "../package.json";

const HELP = `Parley ${pkg.version}: a chat service answering from a local GGUF model.

Usage:
  parley serve [options]                      start the HTTP service
  parley keys create --user <name> [--admin]  issue an API key (printed once)
  parley keys list                            list keys (never the keys themselves)
  parley keys revoke <id>                     revoke a key
  parley model demo [--preset demo|bench-small] [--out <file>]
                                              write a model Parley generates itself
  parley --help | --version

Options (flags override environment variables):
${Object.values(CONFIG_SPEC)
  .map((spec) => `  ${`${spec.flag} / ${spec.env}`.padEnd(44)}${spec.help}${spec.default ? ` (default ${spec.default})` : ""}`)
  .join("\n")}
`;

const KNOWN_FLAGS = new Set([
  ...Object.values(CONFIG_SPEC).map((spec) => spec.flag),
  ...["--admin", "--user", "--preset", "--out", "--help", "--version"],
]);

async function main(argv: readonly string[]): Promise<number> {
  const { flags, positionals } = parseArgv(argv);
  const [command, ...rest] = positionals;
  if (flags.has("--version")) {
    console.log(`parley ${pkg.version}`);
    return 0;
  }
  if (flags.has("--help") || command === undefined || command === "help") {
    console.log(HELP);
    return command === undefined && !flags.has("--help") ? 2 : 0;
  }
  const unknown = [...flags.keys()].filter((flag) => !KNOWN_FLAGS.has(flag));
  if (unknown.length > 0) {
    console.error(`unknown option ${unknown.join(", ")} (see parley --help)`);
    return 2;
  }
  const config = loadConfig(Bun.env, flags);
  switch (command) {
    case "serve":
      return serveCommand(config);
    case "keys":
      return keysCommand(config, rest, flags);
    case "model":
      return modelCommand(config, rest, flags);
    default:
      console.error(`unknown command "${command}"\n\n${HELP}`);
      return 2;
  }
}

try {
  process.exitCode = await main(Bun.argv.slice(2));
} catch (error) {
  if (!(error instanceof ConfigError)) throw error;
  console.error(`parley: ${error.message}`);
  process.exitCode = 2;
}
