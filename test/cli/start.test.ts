/**
 * `bun run start` as a terminal runs it: in a process group of its own, which a Ctrl-C signals as a
 * whole. And, from a natives cache without Parley's compiled natives, serving at once on the npm
 * prebuilt while a stand-in build runs, then moving onto the compiled natives without losing a
 * conversation or a stream. The stand-in copies the compiled natives built on this machine (CI
 * builds them first) into a temporary cache when the test says so.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { compiledNativesDir, PLATFORM_FOLDER } from "../../src/natives/compiled";
import { NODE_LLAMA_CPP_VERSION } from "../../src/natives/version";
import { BURST_MS } from "../../src/stop-signals";
import { allowSlowTests, bearer, eachLine, postChat, presetModel, readSse, tempDir, until } from "../support";

allowSlowTests();

const ROOT = join(import.meta.dir, "../..");
const adminKey = "start-test-admin-key-0123456789abcdef";
const running: Subprocess[] = [];
afterAll(() => {
  for (const child of running) if (child.exitCode === null) process.kill(-child.pid, "SIGKILL");
});

/** A port free now: the server keeps its port across a restart, so it cannot be 0. */
function freePort(): number {
  const probe = Bun.serve({ port: 0, fetch: () => new Response() });
  const { port } = probe;
  probe.stop(true);
  return port!;
}

/** `bun run start` in a new process group, on bench-small (its replies never end by themselves). */
async function start(env: Record<string, string>) {
  const port = freePort();
  const lines: string[] = [];
  const child = Bun.spawn(["bun", "run", "start"], {
    cwd: ROOT,
    env: {
      ...Bun.env,
      PARLEY_PORT: String(port),
      PARLEY_THREADS: "1",
      PARLEY_CONTEXT_SIZE: "1024",
      PARLEY_MODEL: await presetModel("bench-small"),
      PARLEY_MODELS_DIR: tempDir("no-models"),
      PARLEY_DB: join(tempDir("start"), "parley.db"),
      PARLEY_ADMIN_KEY: adminKey,
      ...env,
    },
    stdout: "pipe",
    stderr: "pipe",
    detached: true,
  });
  running.push(child);
  const collect = (stream: ReadableStream<Uint8Array>) => eachLine(stream, (line) => lines.push(line));
  const collected = Promise.all([collect(child.stdout), collect(child.stderr)]);
  const url = `http://127.0.0.1:${port}`;
  const count = (msg: string) => lines.filter((line) => line.includes(`"msg":"${msg}"`)).length;
  const ready = () =>
    until(
      async () =>
        (await fetch(`${url}/readyz`).then(
          (r) => r.status,
          () => 0,
        )) === 200,
      `/readyz 200\n${lines.join("\n")}`,
      60_000,
      50,
    );
  const exited = async () => {
    const code = await child.exited;
    await collected;
    return code;
  };
  return { url, lines, count, ready, exited, ctrlC: () => process.kill(-child.pid, "SIGINT") };
}

const health = async (url: string) => (await (await fetch(`${url}/healthz`)).json()) as { natives_build?: { state: string; step?: string } };

async function logprobs(url: string) {
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { ...bearer(adminKey), "content-type": "application/json" },
    body: JSON.stringify({ model: "bench-small", messages: [{ role: "user", content: "Hi" }], max_tokens: 2, logprobs: true }),
  });
  return { status: response.status, body: (await response.json()) as { error?: { message: string } } };
}

describe("bun run start", () => {
  test("one Ctrl-C is one graceful shutdown, exit 0; a second one later exits at once, exit 1", async () => {
    const once = await start({ PARLEY_BUILD_NATIVES: "off" });
    await once.ready();
    once.ctrlC();
    expect(await once.exited()).toBe(0);
    expect(once.count("shutting down")).toBe(1);
    expect(once.count("stopped")).toBe(1);
    expect(once.count("second signal: exiting at once")).toBe(0);

    const twice = await start({ PARLEY_BUILD_NATIVES: "off", PARLEY_SHUTDOWN_GRACE_S: "60" });
    await twice.ready();
    const response = await postChat(twice.url, adminKey, { message: "Go on", conversation_id: "long", stream: true, max_tokens: 2000 });
    expect(response.status).toBe(200);
    const events = readSse(response);
    for (let step = await events.next(); !step.done && step.value.event !== "delta"; step = await events.next());
    twice.ctrlC();
    await until(() => twice.count("shutting down") === 1, `the shutdown to begin\n${twice.lines.join("\n")}`);
    // The window within which a signal is the same stop, as the terminal's and the runner's are.
    const after = performance.now() + 2 * BURST_MS;
    await until(() => performance.now() > after, "a second Ctrl-C's moment", 5_000, 50);
    twice.ctrlC();
    expect(await twice.exited()).toBe(1);
    expect(twice.count("second signal: exiting at once")).toBe(1);
  }, 90_000);

  const built = compiledNativesDir(NODE_LLAMA_CPP_VERSION);
  const haveNatives = existsSync(join(built, PLATFORM_FOLDER, "llama-addon.node"));
  if (!haveNatives && Bun.env.CI === "true") throw new Error("no compiled natives: CI compiles them (bun run natives) before the tests");
  if (!haveNatives) console.log(`skipped the natives switch: no compiled natives at ${built} to stand in for a build (bun run natives)`);

  test.skipIf(!haveNatives)(
    "serves at once on the prebuilt while the natives build (held while a reply runs), then restarts onto them: the conversation and an open stream carry on",
    async () => {
      const cache = tempDir("natives-cache");
      const target = compiledNativesDir(NODE_LLAMA_CPP_VERSION, { XDG_CACHE_HOME: cache });
      const go = join(cache, "go");
      // Two steps at once, the third once the test has seen the prebuilt serve, then the build lands.
      const standIn = `echo "[1/3] a"; echo "[2/3] b"; while [ ! -e ${go} ]; do sleep 0.1; done; echo "[3/3] c"; mkdir -p ${target} && cp -r ${built}/${PLATFORM_FOLDER} ${target}/part && mv ${target}/part ${target}/${PLATFORM_FOLDER}`;
      mkdirSync(cache, { recursive: true });
      const server = await start({ XDG_CACHE_HOME: cache, PARLEY_BUILD_NATIVES: standIn, PARLEY_SHUTDOWN_GRACE_S: "60" });
      await server.ready();

      // On the prebuilt: the build is reported, and what needs the compiled natives says so.
      await until(async () => (await health(server.url)).natives_build?.step === "[2/3]", "/healthz to report the build's step");
      expect((await health(server.url)).natives_build?.state).toBe("building");
      const refused = await logprobs(server.url);
      expect(refused.status).toBe(400);
      expect(refused.body.error?.message).toContain("bun run natives");
      expect(server.lines.some((line) => line.includes('"natives":"prebuilt"'))).toBe(true);

      const first = await postChat(server.url, adminKey, { message: "First", conversation_id: "kept", max_tokens: 5 });
      expect(first.status).toBe(200);
      const streaming = await postChat(server.url, adminKey, { message: "Second", conversation_id: "kept", stream: true, max_tokens: 400 });
      const events = readSse(streaming);
      for (let step = await events.next(); !step.done && step.value.event !== "delta"; step = await events.next());
      writeFileSync(go, "");
      // The build is held while the stream runs; the stream completes, then the build ends.
      let done: { message: { finish_reason: string } } | undefined;
      for await (const event of events) if (event.event === "done") done = event.data as typeof done;
      expect(done?.message.finish_reason).toBe("length");
      await until(
        () => server.count("Parley's natives are built: the server restarts onto them at the next moment no reply runs") === 1,
        `the build's end\n${server.lines.join("\n")}`,
        60_000,
      );

      await until(() => server.count("serving on Parley's compiled natives") === 1, "the restart", 60_000);
      await server.ready();
      expect(server.lines.some((line) => line.includes(`"natives":"${target}"`))).toBe(true);
      expect((await health(server.url)).natives_build?.state).toBe("built");
      const accepted = await logprobs(server.url);
      expect(accepted.status).toBe(200);

      const third = await postChat(server.url, adminKey, { message: "Third", conversation_id: "kept", max_tokens: 5 });
      expect(third.status).toBe(200);
      const history = (await (
        await fetch(`${server.url}/api/v1.0/chat/messages?conversation_id=kept&sort_by=id:asc`, { headers: bearer(adminKey) })
      ).json()) as { data: { role: string; content: string; finish_reason: string | null }[] };
      expect(history.data.map((row) => [row.role, row.role === "user" ? row.content : row.finish_reason])).toEqual([
        ["user", "First"],
        ["assistant", "length"],
        ["user", "Second"],
        ["assistant", "length"],
        ["user", "Third"],
        ["assistant", "length"],
      ]);

      server.ctrlC();
      expect(await server.exited()).toBe(0);
    },
    120_000,
  );
});
