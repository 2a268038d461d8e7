/**
 * An MCP server on stdio, for Parley to start: `echo` answers with the city it is given; `crash`
 * ends the process; `grow` adds a tool `grown`, which the server tells its clients of.
 */
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const server = new McpServer({ name: "parley-test-stdio", version: "1.0.0" });
server.registerTool("echo", { description: "Says the city back", inputSchema: { city: z.string().max(16) } }, async ({ city }) => ({
  content: [{ type: "text", text: `echo from stdio: ${city}` }],
}));
server.registerTool("crash", { description: "Ends the server", inputSchema: { city: z.string().max(16) } }, async () => process.exit(3));
server.registerTool("grow", { description: "Adds a tool", inputSchema: { city: z.string().max(16) } }, async () => {
  server.registerTool("grown", { description: "A tool added while the server runs", inputSchema: { city: z.string().max(16) } }, async ({ city }) => ({
    content: [{ type: "text", text: `grown: ${city}` }],
  }));
  return { content: [{ type: "text", text: "a tool was added" }] };
});
await server.connect(new StdioServerTransport());
