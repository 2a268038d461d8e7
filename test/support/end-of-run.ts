/**
 * Work for the end of a test run, after its last file: servers shared across files stopped, temp
 * directories removed. `bun test` emits no process `exit` event, so a PostgreSQL stopped on one
 * outlived every run, and `cleanup.ts` (preloaded by bunfig.toml) calls `endRun` from a global
 * `afterAll` instead.
 */
const tasks: (() => void)[] = [];

export function atEndOfRun(task: () => void): void {
  tasks.push(task);
}

/** The latest first: a server stops before its directory goes. */
export function endRun(): void {
  for (const task of tasks.splice(0).reverse()) {
    try {
      task();
    } catch (error) {
      console.error("end of the test run:", error);
    }
  }
}
