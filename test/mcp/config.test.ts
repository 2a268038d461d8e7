/** `PARLEY_MCP_SERVERS` as the operator writes it: pairs, a JSON file, and each mistake refused naming the variable and what is wrong. */
// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${NAME} is the operator's syntax for a value from the environment
import { describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { loadConfig } from "../../src/config";
import { tempDir } from "../support";

const file = (content: unknown) => {
  const path = join(tempDir("mcp-config"), "servers.json");
  writeFileSync(path, typeof content === "string" ? content : JSON.stringify(content));
  return `@${path}`;
};
const servers = (value: string, env: Record<string, string> = {}) => loadConfig({ PARLEY_MCP_SERVERS: value, ...env }).mcpServers;

describe("PARLEY_MCP_SERVERS", () => {
  test("label=url pairs: HTTP servers every key may use, with the defaults", () => {
    expect(servers("wiki=http://10.0.0.7:8080/mcp, files=https://files.internal/mcp")).toEqual([
      { label: "wiki", transport: { kind: "http", url: "http://10.0.0.7:8080/mcp" }, headers: {}, callTimeoutMs: 30_000, maxResultBytes: 65_536 },
      { label: "files", transport: { kind: "http", url: "https://files.internal/mcp" }, headers: {}, callTimeoutMs: 30_000, maxResultBytes: 65_536 },
    ]);
    expect(servers("")).toEqual([]);
  });

  test("@file: a stdio command and an HTTP server, secrets from the environment, who may use each", () => {
    const value = file({
      tools: { command: "bun", args: ["run", "tools.ts"], env: { ROOT: "/srv/${SITE}" }, cwd: "/srv" },
      wiki: {
        url: "http://127.0.0.1:8080/mcp",
        headers: { Authorization: "Bearer ${WIKI_TOKEN}" },
        users: ["alice"],
        roles: ["admin"],
        timeout_s: 5,
        max_result_bytes: 1000,
      },
    });
    expect(servers(value, { WIKI_TOKEN: "s3cret", SITE: "north" })).toEqual([
      {
        label: "tools",
        transport: { kind: "stdio", command: "bun", args: ["run", "tools.ts"], env: { ROOT: "/srv/north" }, cwd: "/srv" },
        headers: {},
        callTimeoutMs: 30_000,
        maxResultBytes: 65_536,
      },
      {
        label: "wiki",
        transport: { kind: "http", url: "http://127.0.0.1:8080/mcp" },
        headers: { Authorization: "Bearer s3cret" },
        allow: { users: ["alice"], roles: ["admin"] },
        callTimeoutMs: 5_000,
        maxResultBytes: 1000,
      },
    ]);
  });

  test.each([
    ["a pair without a label", "http://x/mcp", "must be label=url pairs"],
    ["a URL that is not http(s)", "a=file:///etc/passwd", 'gives server "a" a URL that is not http(s)'],
    ["a label twice", "a=http://x/mcp,a=http://y/mcp", 'lists the label "a" twice'],
    ["a missing file", "@/nonexistent/servers.json", "names a file that is not readable JSON"],
    ["a secret from an unset variable", file({ a: { url: "http://x/mcp", headers: { Authorization: "${NOPE}" } } }), "NOPE, which is not set"],
    ["both url and command", file({ a: { url: "http://x/mcp", command: "x" } }), "a url and a command, or neither"],
    ["an unknown field", file({ a: { url: "http://x/mcp", token: "x" } }), 'an unknown field "token"'],
    ["an unknown role", file({ a: { url: "http://x/mcp", roles: ["root"] } }), 'roles other than "admin" and "user"'],
    ["a label of other characters", file({ "a b": { url: "http://x/mcp" } }), 'has a label of other than letters, digits, _ and - (got "a b")'],
  ])("%s is refused naming the variable", (_, value, message) => {
    let thrown: unknown;
    try {
      servers(value);
    } catch (error) {
      thrown = error;
    }
    expect((thrown as Error).message).toStartWith("PARLEY_MCP_SERVERS ");
    expect((thrown as Error).message).toContain(message);
  });
});
