/** Another process holding a SQLite database's write lock, as `parley keys` or a backup tool might. */

export interface HeldLock {
  /** Commits the held transaction; resolves once the process has exited. */
  release(): Promise<number>;
}

/**
 * Spawns a process that takes the write lock (`BEGIN IMMEDIATE`), runs `sql` inside the
 * transaction and holds it until released; resolves once the lock is taken.
 */
export async function holdWriteLock(dbPath: string, sql = ""): Promise<HeldLock> {
  const script = `
    const { Database } = require("bun:sqlite");
    const db = new Database(process.env.DB_PATH);
    db.exec("PRAGMA busy_timeout = 5000");
    db.exec("BEGIN IMMEDIATE");
    if (process.env.SQL) db.exec(process.env.SQL);
    console.log("locked");
    for await (const _ of Bun.stdin.stream());
    db.exec("COMMIT");
  `;
  const child = Bun.spawn(["bun", "-e", script], { env: { ...Bun.env, DB_PATH: dbPath, SQL: sql }, stdin: "pipe", stdout: "pipe", stderr: "pipe" });
  const { value } = await child.stdout.getReader().read();
  if (!new TextDecoder().decode(value).includes("locked")) {
    throw new Error(`the lock holder failed (exit ${await child.exited}): ${await new Response(child.stderr).text()}`);
  }
  return {
    release: () => {
      child.stdin.end();
      return child.exited;
    },
  };
}
