/** The tests' streamable-HTTP MCP server in a process of its own (for a test that blocks its own event loop): prints its URL. */
import { mcpHttpServer } from "./mcp";

console.log(mcpHttpServer().url);
