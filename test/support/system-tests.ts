/**
 * Tests that change the machine beyond the checkout and its temp directories (a system user, port
 * 8080, tmpfs mounts) run only when asked: `PARLEY_SYSTEM_TESTS=1`, which CI sets (.ci/run).
 */

export const SYSTEM_TESTS = "PARLEY_SYSTEM_TESTS";

/**
 * Why the system-level test `name` skips (printed), or undefined when it runs. Unasked, it skips
 * before `cannot` probes anything; asked, whatever `cannot` says stops it here is a failure, not a
 * skip, so a run that asked for these tests (CI's) cannot pass without them.
 */
export function systemTests(name: string, cannot: () => string | undefined): string | undefined {
  if (Bun.env[SYSTEM_TESTS] !== "1") {
    const reason = `they change the machine; ${SYSTEM_TESTS}=1 runs them (CONTRIBUTING.md, Tests)`;
    console.warn(`skipping ${name}: ${reason}`);
    return reason;
  }
  const reason = cannot();
  if (reason !== undefined) throw new Error(`${name} cannot run, though ${SYSTEM_TESTS}=1 asks for them: ${reason}`);
  return undefined;
}
