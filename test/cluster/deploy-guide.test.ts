/**
 * deploy/README.md's "Setting up a node" commands, run as written, as root, on this machine:
 * the user, the binary under /opt/parley, the unit, the root-and-group-only env file, then
 * `systemctl enable --now parley@8080`, with a stand-in for systemctl (systemctl.ts), which cannot
 * run here. The values an operator chooses are the only change: the database's host (this test's
 * PostgreSQL, on its socket) in PARLEY_DB. The database is made as "What you need" says, and the
 * model file put where PARLEY_MODEL says. The node then answers as the guide promises.
 * Everything the commands made is removed afterwards. It changes the machine, so it runs only with
 * PARLEY_SYSTEM_TESTS=1 (system-tests.ts), and then needs root and a machine without a parley user
 * or install (CI's is one).
 */
import { afterAll, beforeAll, expect, setDefaultTimeout, test } from "bun:test";
import { chmodSync, copyFileSync, existsSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { hostname } from "node:os";
import { basename, join } from "node:path";
import postgres from "postgres";
import { allowSlowTests, postgresMissing, presetModel, startPostgres, systemTests, tempDir, until } from "../support";

allowSlowTests();

setDefaultTimeout(180_000);

const ROOT = join(import.meta.dir, "../..");
const guide = readFileSync(join(ROOT, "deploy/README.md"), "utf8");
/** The shell block after "Setting up a node". */
const block = /Setting up a node[\s\S]*?```sh\n([\s\S]*?)```/.exec(guide)?.[1];
const PORT = 8080;
const MADE = ["/opt/parley", "/etc/parley", "/etc/systemd/system/parley@.service", "/var/lib/parley", "/var/cache/parley"];

const portTaken = () => {
  try {
    Bun.listen({ hostname: "0.0.0.0", port: PORT, socket: { data() {} } }).stop(true);
    return false;
  } catch {
    return true;
  }
};

const skip = systemTests("the deploy guide's commands", () => {
  if (process.getuid?.() !== 0) return "they need root";
  if (Bun.spawnSync(["id", "parley"]).exitCode === 0) return "a parley user exists already";
  const there = MADE.find((path) => existsSync(path));
  if (there) return `${there} exists already`;
  if (portTaken()) return `port ${PORT} is taken`;
  return postgresMissing();
});

const state = tempDir("systemctl");
const pidFile = join(state, `parley@${PORT}.pid`);

afterAll(async () => {
  if (skip !== undefined) return;
  if (existsSync(pidFile)) {
    try {
      process.kill(-Number(readFileSync(pidFile, "utf8")), "SIGKILL");
    } catch {}
  }
  // userdel refuses a user with a process still running: the killed node may take a moment.
  await until(() => Bun.spawnSync(["pgrep", "-u", "parley"]).exitCode !== 0, "the parley user's processes to end");
  const userdel = Bun.spawnSync(["userdel", "parley"], { stderr: "pipe" });
  for (const path of MADE) rmSync(path, { recursive: true, force: true });
  if (userdel.exitCode !== 0) throw new Error(`userdel parley failed: ${userdel.stderr.toString()}`);
});

let dbUrl = "";

beforeAll(async () => {
  if (skip !== undefined) return;
  // "What you need": one database and a role that owns it.
  const server = await startPostgres();
  chmodSync(server.socketDir, 0o755);
  const admin = postgres({ host: server.socketDir, user: "postgres", database: "postgres", max: 1, onnotice: () => {} });
  await admin.unsafe("CREATE ROLE parley LOGIN PASSWORD 'password'");
  await admin.unsafe("CREATE DATABASE parley OWNER parley");
  await admin.end();
  dbUrl = `postgres://parley:password@/parley?host=${server.socketDir}`;
});

test("the guide names every backend of haproxy.cfg, whose server lists hold the nodes", () => {
  const backends = Array.from(readFileSync(join(ROOT, "deploy/haproxy.cfg"), "utf8").matchAll(/^backend (\S+)/gm), (match) => match[1]!);
  expect(backends.length).toBeGreaterThan(1);
  for (const backend of backends) expect(guide, backend).toContain(`\`${backend}\``);
});

test.skipIf(skip !== undefined)("the setup commands run as written, and the node they start answers with the settings of the env file", async () => {
  expect(block).toBeDefined();
  const commands = block!.replace("postgres://parley:password@db-host/parley", dbUrl);
  expect(commands).not.toBe(block);
  const model = /^PARLEY_MODEL=(.+)$/m.exec(commands)![1]!;
  const adminKey = /^PARLEY_ADMIN_KEY=(.+)$/m.exec(commands)![1]!;
  // Run where the guide's relative paths point: a build's dist/parley, the repository's deploy/,
  // and the operator's model file, copied there as the guide says (the demo model stands in).
  const cwd = tempDir("deploy-guide");
  copyFileSync(await presetModel("demo"), join(cwd, basename(model)));
  const build = Bun.spawnSync([process.execPath, "run", join(ROOT, "src/build/build.ts"), "--prebuilt-natives", "--outfile", join(cwd, "dist/parley")], {
    stdout: "pipe",
    stderr: "pipe",
  });
  expect({ build: build.exitCode, stderr: build.stderr.toString() }).toEqual({ build: 0, stderr: expect.any(String) });
  mkdirSync(join(cwd, "deploy"));
  copyFileSync(join(ROOT, "deploy/parley@.service"), join(cwd, "deploy/parley@.service"));
  const shims = tempDir("systemctl-bin");
  await Bun.write(join(shims, "systemctl"), `#!/bin/sh\nexec "${process.execPath}" "${join(import.meta.dir, "systemctl.ts")}" "$@"\n`);
  chmodSync(join(shims, "systemctl"), 0o755);

  const run = Bun.spawnSync(["bash", "-euo", "pipefail", "-c", commands], {
    cwd,
    env: { PATH: `${shims}:/usr/sbin:/usr/bin:/sbin:/bin`, SYSTEMCTL_STANDIN_STATE: state },
    stdout: "pipe",
    stderr: "pipe",
  });
  expect({ code: run.exitCode, stderr: run.stderr.toString() }).toEqual({ code: 0, stderr: "" });

  // What the commands made, as the guide says.
  expect(Bun.spawnSync(["id", "-u", "parley"]).exitCode).toBe(0);
  const env = Bun.spawnSync(["stat", "-c", "%a %U %G", "/etc/parley/parley.env"]).stdout.toString().trim();
  expect(env).toBe("640 root parley");

  const url = `http://127.0.0.1:${PORT}`;
  const log = () => readFileSync(join(state, `parley@${PORT}.log`), "utf8");
  await until(async () => (await fetch(`${url}/readyz`).catch(() => undefined))?.status === 200, "the node to be ready", 120_000).catch((error: Error) => {
    throw new Error(`${error.message}; its log:\n${log()}`);
  });
  // The env file's admin key was taken, and the node names itself as the unit says.
  const chat = await fetch(`${url}/api/v1.0/chat`, {
    method: "POST",
    headers: { authorization: `Bearer ${adminKey}`, "content-type": "application/json" },
    body: JSON.stringify({ message: "Hello", conversation_id: "deploy-guide", temperature: 0 }),
  });
  expect(chat.status).toBe(200);
  expect(chat.headers.get("x-parley-node")).toBe(`${hostname()}:${PORT}`);
  // Its data where the unit puts it, owned by its user; no key in its output.
  expect(
    Bun.spawnSync(["stat", "-c", "%U", `/var/lib/parley/node-${PORT}`])
      .stdout.toString()
      .trim(),
  ).toBe("parley");
  expect(log()).not.toContain(adminKey);
});
