/**
 * Packs folders of node-llama-cpp natives (the CPU build, and the CUDA build when asked for) into
 * one zstd-compressed tar for the executable. The tar's entries are `<folder>/<file>`, so the
 * directory it unpacks into is what node-llama-cpp calls `binsDir`. zstd level 18 packs the 30 MB of the prebuilt into 5.4 MB, 1.6 MB less than level 9
 * (the ggml CPU variants are near-copies of each other); level 22 saves a few hundred KB more, which
 * keeps the executable under its 120 MB budget with the locally built natives (more CPU variants).
 * It takes a while, so the archive is kept in `node_modules/.cache/parley` under its content hash
 * and level, and made again only when either changes.
 */
import { mkdirSync, readdirSync, renameSync, statSync } from "node:fs";
import { join } from "node:path";
import { type NativesRequirements, nativesRequirements } from "./requirements";
import { readTar } from "./tar";

export interface PackedNatives {
  /** The `.tar.zst` to embed. */
  archive: string;
  /** Cache-directory name at run time: `<node-llama-cpp version>-<16 hex of the content hash>`. */
  id: string;
  /** The folders packed, e.g. `linux-x64` and `linux-x64-cuda`. */
  folders: readonly string[];
  files: number;
  bytes: number;
  requires: NativesRequirements;
}

const ZSTD_LEVEL = 22;

export async function packNatives(binsDir: string, folders: readonly string[], version: string, cacheDir: string): Promise<PackedNatives> {
  const files = new Map<string, Uint8Array>();
  for (const folder of folders) {
    const root = join(binsDir, folder);
    for (const name of readdirSync(root, { recursive: true, encoding: "utf8" })) {
      const full = join(root, name);
      // A symlinked library (libfoo.so.1 -> libfoo.so.1.2) is stored as the file it points to.
      if (!statSync(full).isFile()) continue;
      files.set(`${folder}/${name}`, await Bun.file(full).bytes());
    }
  }
  const hash = contentHash(files);
  const id = `${version}-${hash.slice(0, 16)}`;
  const archive = join(cacheDir, `natives-${id}.zst${ZSTD_LEVEL}.tar.zst`);
  if (!(await Bun.file(archive).exists())) {
    mkdirSync(cacheDir, { recursive: true });
    const tar = await new Bun.Archive(Object.fromEntries(files)).bytes();
    const tmp = `${archive}.${process.pid}.tmp`;
    await Bun.write(tmp, await Bun.zstdCompress(tar, { level: ZSTD_LEVEL }));
    renameSync(tmp, archive);
  }
  // Read back with the runtime's own reader: a tar feature it does not handle, or a damaged cached
  // archive, fails the build instead of the first start on a server.
  const unpacked = new Map<string, Uint8Array>();
  for (const entry of readTar(Bun.zstdDecompressSync(await Bun.file(archive).bytes()))) unpacked.set(entry.name, entry.data);
  if (contentHash(unpacked) !== hash) throw new Error(`${archive} does not unpack to the files of ${binsDir}; delete it and build again`);
  return {
    archive,
    id,
    folders,
    files: files.size,
    bytes: [...files.values()].reduce((sum, data) => sum + data.length, 0),
    requires: nativesRequirements(files.values()),
  };
}

function contentHash(files: ReadonlyMap<string, Uint8Array>): string {
  const hasher = new Bun.CryptoHasher("sha256");
  for (const name of [...files.keys()].sort()) {
    const data = files.get(name)!;
    hasher.update(`${name}\0${data.length}\0`);
    hasher.update(data);
  }
  return hasher.digest("hex");
}
