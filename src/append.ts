/**
 * Appends every item of `items` to `target`. A spread into a call (`push(...items)`) passes each
 * item as an argument, and an array of a few hundred thousand (a large prompt's tokens) overflows
 * the stack: no `src/` file spreads into a call (test/lint/spread-args.test.ts).
 */
export function append<T>(target: T[], items: Iterable<T>): T[] {
  for (const item of items) target.push(item);
  return target;
}
