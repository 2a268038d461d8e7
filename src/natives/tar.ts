/**
 * Reads the plain ustar archives that `Bun.Archive` writes for the embedded natives. Synchronous on
 * purpose: node-llama-cpp asks for the natives' directory through a synchronous `getBinsDir()`.
 * Only regular files and directories are expected; anything else (links, long-name extensions)
 * throws, and the build reads every archive back with this reader before embedding it.
 */
export interface TarEntry {
  name: string;
  data: Uint8Array;
}

const BLOCK = 512;

export function* readTar(tar: Uint8Array): Generator<TarEntry> {
  const decoder = new TextDecoder();
  const field = (at: number, length: number) => decoder.decode(tar.subarray(at, at + length)).replace(/\0.*$/s, "");
  for (let at = 0; at + BLOCK <= tar.length; ) {
    const name = field(at, 100);
    if (name === "") return; // the zero blocks that end an archive
    const size = Number.parseInt(field(at + 124, 12).trim(), 8);
    const type = field(at + 156, 1);
    const prefix = field(at + 345, 155);
    const path = prefix === "" ? name : `${prefix}/${name}`;
    if (!Number.isSafeInteger(size) || at + BLOCK + size > tar.length) throw new Error(`tar: bad size for ${path}`);
    if (path.startsWith("/") || path.split("/").includes("..")) throw new Error(`tar: unsafe path ${path}`);
    at += BLOCK;
    if (type === "0" || type === "") yield { name: path, data: tar.subarray(at, at + size) };
    else if (type !== "5") throw new Error(`tar: unsupported entry type "${type}" for ${path}`);
    at += Math.ceil(size / BLOCK) * BLOCK;
  }
}
