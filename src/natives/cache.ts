/**
 * Where the single executable puts node-llama-cpp's native libraries. They cannot be loaded from
 * inside the executable: the addon finds its libraries through `$ORIGIN` and ggml scans its own
 * directory for CPU backends, so all of them must sit in one real directory. They are unpacked
 * once per build into `<root>/<id>` (id = node-llama-cpp version + content hash), which only ever
 * appears complete: files are written to a temp directory that is then renamed into place, so two
 * processes starting at once both end up with the same, whole directory.
 */
import {
  chmodSync,
  closeSync,
  existsSync,
  fsyncSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { homedir } from "node:os";
import { dirname, isAbsolute, join, resolve } from "node:path";
import { readTar } from "./tar";

export interface EmbeddedNatives {
  /** The zstd-compressed tar (inside the executable a `/$bunfs/...` path). */
  archive: string;
  /** `<node-llama-cpp version>-<16 hex of content hash>`. */
  id: string;
}

const TMP_PREFIX = ".tmp-";
const ID_PATTERN = /^\d+\.\d+\.\d+\S*-[0-9a-f]{16}$/;
/** A temp directory this old belongs to a start that died mid-unpack (unpacking takes well under a second). */
const STALE_TMP_MS = 10 * 60_000;

/** `PARLEY_NATIVES_DIR` (for homes mounted `noexec`), else `$XDG_CACHE_HOME/parley/natives`, else `~/.cache/parley/natives`. */
export function nativesRoot(env: Record<string, string | undefined> = Bun.env): string {
  if (env.PARLEY_NATIVES_DIR) return resolve(env.PARLEY_NATIVES_DIR);
  return join(userCacheDir(env), "parley", "natives");
}

/** `$XDG_CACHE_HOME`, else `~/.cache`. */
export function userCacheDir(env: Record<string, string | undefined> = Bun.env): string {
  // The XDG spec says to ignore a relative XDG_CACHE_HOME.
  return env.XDG_CACHE_HOME && isAbsolute(env.XDG_CACHE_HOME) ? env.XDG_CACHE_HOME : join(homedir(), ".cache");
}

/**
 * Returns the directory holding the unpacked natives, unpacking them first if this build never has.
 * A failure is printed here as well as thrown, because node-llama-cpp turns any error while it looks
 * for binaries into a bare "no binary found".
 */
export function installNatives(natives: EmbeddedNatives, root = nativesRoot()): string {
  try {
    return install(natives, root);
  } catch (err) {
    console.error(
      `parley: cannot unpack the native libraries into ${root} (PARLEY_NATIVES_DIR can name another ` +
        `directory; it must be writable and allow executing files): ${err instanceof Error ? err.message : String(err)}`,
    );
    throw err;
  }
}

function install({ archive, id }: EmbeddedNatives, root: string): string {
  const dir = join(root, id);
  if (existsSync(dir)) return dir;
  mkdirSync(root, { recursive: true });
  const tmp = mkdtempSync(join(root, TMP_PREFIX));
  try {
    unpack(readFileSync(archive), tmp);
    // mkdtemp makes it private; the libraries are no secret, and a shared PARLEY_NATIVES_DIR filled
    // by one user (an install step run as root) must be readable by the service's user.
    chmodSync(tmp, 0o755);
    renameSync(tmp, dir);
  } catch (err) {
    rmSync(tmp, { recursive: true, force: true });
    // Renaming onto a directory fails when another process got there first; its copy is as good.
    if (existsSync(dir)) return dir;
    throw err;
  }
  removeStale(root, id);
  return dir;
}

function unpack(archive: Uint8Array, into: string): void {
  for (const { name, data } of readTar(Bun.zstdDecompressSync(archive))) {
    const path = join(into, name);
    mkdirSync(dirname(path), { recursive: true });
    const fd = openSync(path, "wx", 0o755);
    try {
      writeFileSync(fd, data);
      // Without it a power loss after the rename could leave a complete-looking directory of empty files.
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
  }
}

/**
 * Removes other builds' directories once a new build is installed (processes still running an old
 * build keep their already-loaded libraries) and temp directories of starts that died. Only names
 * this module creates are touched, since `PARLEY_NATIVES_DIR` may point at a shared directory.
 */
function removeStale(root: string, keep: string): void {
  for (const name of readdirSync(root)) {
    const path = join(root, name);
    try {
      const stale = name.startsWith(TMP_PREFIX) ? Date.now() - statSync(path).mtimeMs > STALE_TMP_MS : ID_PATTERN.test(name) && name !== keep;
      if (stale) rmSync(path, { recursive: true, force: true });
    } catch {
      // Another process cleaning up at the same time; whatever it left is removed next time.
    }
  }
}
