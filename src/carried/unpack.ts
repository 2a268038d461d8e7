/**
 * The models an executable carries are served from files: llama.cpp maps a model from a path, and
 * the executable's own file holds them at offsets it cannot be told. Each file is unpacked once into
 * `<data dir>/carried/<sha256>/<its name>`, written under a temp name, checked against the sha256
 * the build recorded, then renamed into place, so a start only ever sees a whole, verified file.
 * A later start uses it as long as its size and time are those recorded when it was verified
 * (`.verified` beside it); one that changed is hashed again and unpacked again if it differs.
 */
import { closeSync, fsyncSync, mkdirSync, openSync, readdirSync, renameSync, rmSync, statfsSync, statSync, writeSync } from "node:fs";
import { join } from "node:path";
import type { CarriedFile, CarriedModel } from "./models";

/** A carried model could not be unpacked (no room, an unwritable directory): the message says what is needed. */
export class UnpackError extends Error {
  override name = "UnpackError";
}

/** Room left free besides the file: a full disk would fail the database and the logs next. */
const SPARE_BYTES = 64 * 2 ** 20;
const VERIFIED = ".verified";

export interface Unpacked {
  /** What PARLEY_MODEL would name for each carried model: its file, or `model+projector`. */
  paths: string[];
  /** The files written by this call (none when every file was already there). */
  written: string[];
}

/** Unpacks the carried models into `<dataDir>/carried/` unless already there; removes other builds' copies. */
export async function unpackCarried(models: readonly CarriedModel[], dataDir: string): Promise<Unpacked> {
  const root = join(dataDir, "carried");
  const written: string[] = [];
  const place = async (file: CarriedFile) => {
    const { path, wrote } = await ensureFile(file, root);
    if (wrote) written.push(path);
    return path;
  };
  const paths: string[] = [];
  for (const model of models) {
    const path = await place(model);
    paths.push(model.projector ? `${path}+${await place(model.projector)}` : path);
  }
  if (models.length > 0) removeOthers(root, new Set(models.flatMap((model) => [model.sha256, ...(model.projector ? [model.projector.sha256] : [])])));
  return { paths, written };
}

async function ensureFile(file: CarriedFile, root: string): Promise<{ path: string; wrote: boolean }> {
  const dir = join(root, file.sha256);
  const path = join(dir, file.name);
  if (await intact(file, path)) return { path, wrote: false };
  mkdirSync(dir, { recursive: true });
  const free = freeBytes(dir);
  if (free < file.bytes + SPARE_BYTES) throw noRoom(file, dir, free);
  const tmp = join(dir, `.tmp-${process.pid}-${file.name}`);
  try {
    const sha256 = await copy(file.asset, tmp);
    if (sha256 !== file.sha256)
      throw new UnpackError(`the carried ${file.name} unpacked to sha256 ${sha256}, not the ${file.sha256} it was built with: the executable is damaged`);
    renameSync(tmp, path);
  } catch (error) {
    rmSync(tmp, { force: true });
    if ((error as NodeJS.ErrnoException).code === "ENOSPC") throw noRoom(file, dir, freeBytes(dir));
    throw error;
  }
  await stamp(path);
  return { path, wrote: true };
}

/** Whether `path` holds the file: as stamped when verified, else hashed now (and stamped when it matches). */
async function intact(file: CarriedFile, path: string): Promise<boolean> {
  const stat = statSync(path, { throwIfNoEntry: false });
  if (stat?.size !== file.bytes) return false;
  const stampFile = Bun.file(join(path, "..", VERIFIED));
  if ((await stampFile.exists()) && (await stampFile.text()) === stampOf(path)) return true;
  if ((await sha256Of(path)) !== file.sha256) return false;
  await stamp(path);
  return true;
}

const stampOf = (path: string) => {
  const { size, mtimeMs, ino } = statSync(path);
  return `${size}:${mtimeMs}:${ino}\n`;
};

async function stamp(path: string): Promise<void> {
  await Bun.write(join(path, "..", VERIFIED), stampOf(path));
}

/** Copies `from` into the new file `to`, synced to disk; returns its sha256. */
async function copy(from: string, to: string): Promise<string> {
  const hasher = new Bun.CryptoHasher("sha256");
  const fd = openSync(to, "wx", 0o644);
  try {
    for await (const chunk of Bun.file(from).stream()) {
      hasher.update(chunk);
      for (let at = 0; at < chunk.length; ) at += writeSync(fd, chunk, at);
    }
    // Without it a power loss after the rename could leave a whole-looking file of zeros.
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  return hasher.digest("hex");
}

async function sha256Of(path: string): Promise<string> {
  const hasher = new Bun.CryptoHasher("sha256");
  for await (const chunk of Bun.file(path).stream()) hasher.update(chunk);
  return hasher.digest("hex");
}

function freeBytes(dir: string): number {
  const { bavail, bsize } = statfsSync(dir);
  return bavail * bsize;
}

function noRoom(file: CarriedFile, dir: string, free: number): UnpackError {
  const mb = (bytes: number) => `${Math.ceil(bytes / 1e6)} MB`;
  return new UnpackError(
    `no room to unpack the model this executable carries: ${file.name} needs ${mb(file.bytes + SPARE_BYTES)} free in ${dir}, which has ${mb(free)} ` +
      "(free some space, or name a data directory on a larger disk with PARLEY_DATA_DIR)",
  );
}

/** Removes the copies of models this executable does not carry (an earlier build's), and temp files of starts that died. */
function removeOthers(root: string, keep: ReadonlySet<string>): void {
  for (const name of readdirSync(root)) {
    if (!/^[0-9a-f]{64}$/.test(name)) continue;
    const dir = join(root, name);
    try {
      if (!keep.has(name)) rmSync(dir, { recursive: true, force: true });
      else for (const entry of readdirSync(dir)) if (diedWriting(entry)) rmSync(join(dir, entry), { force: true });
    } catch {
      // Another start cleaning up at the same time; what it left goes next time.
    }
  }
}

/** A temp file whose writer is no longer running. */
function diedWriting(entry: string): boolean {
  const pid = /^\.tmp-(\d+)-/.exec(entry)?.[1];
  if (pid === undefined) return false;
  try {
    process.kill(Number(pid), 0);
    return false;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "ESRCH";
  }
}
