/**
 * HAProxy in front of Parley nodes, running the shipped deploy/haproxy.cfg with only its listening
 * address and its server lines replaced: what the tests route through is what operators deploy.
 */

import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { tempDir } from "./files";
import { until } from "./wait";

const ROOT = join(import.meta.dir, "../..");
const HAPROXY = ["/usr/sbin/haproxy", "/usr/bin/haproxy"].find((path) => existsSync(path));

/** Why HAProxy tests cannot run here (undefined when they can); under CI a missing HAProxy is an error. */
export function haproxyMissing(): string | undefined {
  if (HAPROXY !== undefined) return undefined;
  const reason = "HAProxy not found (apt-get install haproxy)";
  if (Bun.env.CI === "true") throw new Error(`${reason}: required under CI`);
  console.warn(`skipping HAProxy tests: ${reason}`);
  return reason;
}

export interface Balancer {
  url: string;
  child: Subprocess;
  stop(): Promise<void>;
}

/** A port nobody listens on right now. */
function freePort(): number {
  const server = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const { port } = server;
  server.stop(true);
  return port;
}

/** The shipped configuration, listening on `port` and balancing over `nodes` (`host:port` each). */
export function haproxyConfig(port: number, nodes: string[]): string {
  const shipped = readFileSync(join(ROOT, "deploy/haproxy.cfg"), "utf8");
  const servers = (tracked: boolean) =>
    nodes.map((node, i) => `    server node${i + 1} ${node}${tracked ? ` track parley_by_header/node${i + 1}` : ""}`).join("\n");
  // Every block between a marker's lines: several backends track the nodes.
  const replace = (text: string, marker: string, lines: string) => {
    const pattern = new RegExp(`( *# ${marker}-begin\\n)[\\s\\S]*?( *# ${marker}-end)`, "g");
    const replaced = text.replace(pattern, `$1${lines}\n$2`);
    if (replaced === text) throw new Error(`deploy/haproxy.cfg lost its "# ${marker}-begin/end" markers`);
    return replaced;
  };
  const bound = shipped.replace(/^( *)bind :8080$/m, `$1bind 127.0.0.1:${port}`);
  if (bound === shipped) throw new Error('deploy/haproxy.cfg lost its "bind :8080" line');
  return replace(replace(bound, "parley-nodes", servers(false)), "parley-tracked-nodes", servers(true));
}

/** Starts HAProxy over `nodes` (base URLs) and resolves once it answers and sees every node up. */
export async function startHaproxy(nodes: string[]): Promise<Balancer> {
  if (HAPROXY === undefined) throw new Error("HAProxy not found");
  const port = freePort();
  const file = join(tempDir("haproxy"), "haproxy.cfg");
  writeFileSync(
    file,
    haproxyConfig(
      port,
      nodes.map((url) => new URL(url).host),
    ),
  );
  const child = Bun.spawn([HAPROXY, "-db", "-f", file], { stdout: "ignore", stderr: "pipe" });
  const url = `http://127.0.0.1:${port}`;
  const stop = async () => {
    child.kill("SIGKILL");
    await child.exited;
  };
  try {
    // /readyz through the balancer answers 200 once HAProxy listens and a checked node is up.
    await until(
      async () =>
        (await fetch(`${url}/readyz`).then(
          (r) => r.status,
          () => 0,
        )) === 200,
      "HAProxy to route",
      15_000,
      50,
    );
  } catch (error) {
    await stop();
    throw new Error(`${(error as Error).message}: ${await new Response(child.stderr).text()}`);
  }
  return { url, child, stop };
}
