/**
 * One native build at a time in the shared compiled-natives cache: two `bun run natives` (or a
 * `bun run build` and a server's background build) would compile into the same node-llama-cpp
 * tree and write the same log. The lock is a directory holding its holder's pid, created whole by
 * a rename (a rename onto a directory that is not empty fails), so nobody ever reads a lock
 * without its pid; a lock whose pid is gone (a build killed) is stale and taken over.
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { basename, dirname, join } from "node:path";

const LOCK_NAME = "build.lock";
const POLL_MS = 500;

/** Runs `work` holding the cache's build lock, waiting for another holder first (`onWait` hears of it once). */
export async function withBuildLock<T>(cacheRoot: string, work: () => Promise<T>, onWait?: (holder: number) => void): Promise<T> {
  await mkdir(cacheRoot, { recursive: true });
  const lock = join(cacheRoot, LOCK_NAME);
  let told = false;
  for (;;) {
    if (take(cacheRoot, lock)) break;
    const holder = holderOf(lock);
    if (holder === undefined || !alive(holder)) {
      breakStale(lock, holder);
      continue;
    }
    if (!told) onWait?.(holder);
    told = true;
    await Bun.sleep(POLL_MS);
  }
  try {
    return await work();
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
}

/** The pid holding the cache's build lock, if a live process does. */
export function buildLockHolder(cacheRoot: string): number | undefined {
  const holder = holderOf(join(cacheRoot, LOCK_NAME));
  return holder !== undefined && alive(holder) ? holder : undefined;
}

/**
 * Removes the other recipes' builds of this node-llama-cpp version from the cache, keeping
 * `binsDir` (a changed recipe never reuses them, and each is some 17 MB); builds of other versions
 * stay, for checkouts still on them. Call holding the lock.
 */
export function removeOtherRecipes(binsDir: string, nodeLlamaCppVersion: string): string[] {
  const root = dirname(binsDir);
  const removed = readdirSync(root).filter((name) => name.startsWith(`${nodeLlamaCppVersion}-`) && name !== basename(binsDir));
  for (const name of removed) rmSync(join(root, name), { recursive: true, force: true });
  return removed;
}

function take(cacheRoot: string, lock: string): boolean {
  const staging = mkdtempSync(join(cacheRoot, `.${LOCK_NAME}-`));
  writeFileSync(join(staging, "pid"), String(process.pid));
  try {
    renameSync(staging, lock);
    return true;
  } catch {
    rmSync(staging, { recursive: true, force: true });
    return false;
  }
}

function holderOf(lock: string): number | undefined {
  try {
    const pid = Number(readFileSync(join(lock, "pid"), "utf8"));
    return Number.isSafeInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

/** Moved aside first, so that of two processes finding it stale only one removes it. */
function breakStale(lock: string, holder: number | undefined): void {
  const aside = `${lock}.stale-${process.pid}`;
  try {
    renameSync(lock, aside);
  } catch {
    return;
  }
  // Another process took the lock between our read and the move: it is theirs, put it back.
  if (holderOf(aside) !== holder && !existsSync(lock)) {
    try {
      renameSync(aside, lock);
      return;
    } catch {}
  }
  rmSync(aside, { recursive: true, force: true });
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: it exists, another user's.
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}
