/**
 * A stand-in for `systemctl`, for the deploy guide's commands where systemd cannot run (a test
 * machine): `daemon-reload` does nothing, and `enable --now name@instance` starts the installed
 * unit as systemd would in the parts a node depends on: the instance and host name in its lines,
 * its user, working, state and cache directories, its EnvironmentFile then Environment, and its
 * ExecStart in a session of its own, its output in `<state>/<unit>.log` and its process group in
 * `<state>/<unit>.pid` (the state directory is SYSTEMCTL_STANDIN_STATE). Sandboxing lines
 * (ProtectSystem=, …) are not applied.
 */
import { chownSync, closeSync, mkdirSync, openSync, readFileSync, writeFileSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import { parseUnit } from "../support/unit-file";

const UNIT_DIR = "/etc/systemd/system";

function start(name: string, state: string): void {
  const at = name.indexOf("@");
  if (at < 0) throw new Error(`${name}: only template instances are stood in for`);
  const instance = name.slice(at + 1).replace(/\.service$/, "");
  const text = readFileSync(join(UNIT_DIR, `${name.slice(0, at)}@.service`), "utf8")
    .replaceAll("%i", instance)
    .replaceAll("%H", hostname());
  const service = parseUnit(text).get("Service")!;
  const one = (key: string) => service.get(key)?.[0];
  const user = one("User") ?? "root";
  const id = (flag: string) => Number(Bun.spawnSync(["id", flag, user]).stdout.toString().trim());
  for (const [key, root] of [
    ["StateDirectory", "/var/lib"],
    ["CacheDirectory", "/var/cache"],
  ] as const) {
    for (const dir of (service.get(key) ?? []).flatMap((value) => value.split(/\s+/))) {
      mkdirSync(join(root, dir), { recursive: true });
      chownSync(join(root, dir), id("-u"), id("-g"));
    }
  }
  const env: Record<string, string> = { PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", HOME: "/" };
  for (const file of service.get("EnvironmentFile") ?? []) {
    for (const line of readFileSync(file, "utf8").split("\n")) {
      const eq = line.indexOf("=");
      if (eq > 0 && !line.trimStart().startsWith("#")) env[line.slice(0, eq).trim()] = line.slice(eq + 1).trim();
    }
  }
  for (const line of service.get("Environment") ?? []) {
    const eq = line.indexOf("=");
    env[line.slice(0, eq)] = line.slice(eq + 1);
  }
  const log = openSync(join(state, `${name}.log`), "a");
  const child = Bun.spawn(["setsid", "runuser", "-u", user, "--", ...one("ExecStart")!.split(/\s+/)], {
    cwd: one("WorkingDirectory") ?? "/",
    env,
    stdio: ["ignore", log, log],
  });
  closeSync(log);
  child.unref();
  writeFileSync(join(state, `${name}.pid`), String(child.pid));
}

const [command, ...rest] = process.argv.slice(2);
const state = process.env.SYSTEMCTL_STANDIN_STATE;
if (command === "daemon-reload") process.exit(0);
if (command === "enable" && rest[0] === "--now" && state) {
  for (const name of rest.slice(1)) start(name, state);
  process.exit(0);
}
console.error(`systemctl stand-in: ${[command, ...rest].join(" ")} is not stood in for`);
process.exit(1);
