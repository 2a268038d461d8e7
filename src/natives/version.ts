/**
 * The node-llama-cpp release everything in this folder is written for: the C++ compiled into its
 * addon (which includes its private headers), the internals addon.ts reaches, and the patches of
 * embed-plugin.ts. Checked where a mismatch would otherwise go unnoticed: when the natives are
 * compiled (compile.ts), at CMake's configure step (decode-thread.cmake, fatal), when the executable
 * is built (embed-plugin.ts), and when the engine loads (local.ts). package.json pins the same.
 */
export const NODE_LLAMA_CPP_VERSION = "3.22.1";

/** Throws, naming what to do, unless `found` is the version Parley's natives are written for. */
export function checkNodeLlamaCppVersion(found: string, where: string): void {
  if (found === NODE_LLAMA_CPP_VERSION) return;
  throw new Error(
    `${where}: Parley's natives are written for node-llama-cpp ${NODE_LLAMA_CPP_VERSION}, found ${found}. ` +
      "Install the version package.json pins, or port src/natives/ to the new one and update NODE_LLAMA_CPP_VERSION.",
  );
}
