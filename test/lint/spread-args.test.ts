/**
 * No file of `src/` spreads an array into the arguments of the calls that take any number of them
 * and are handed data (`push(...tokens)`, `Math.max(...scores)`): each item becomes an argument,
 * and an array as long as a large request's tokens overflows the stack, a 500 for an ordinary
 * request. `append` (src/append.ts) adds many, a `reduce` finds the largest. A spread of an array
 * written out in place stays allowed. The linter has no such rule, so the compiler's parser finds them.
 */
import { describe, expect, test } from "bun:test";
import { Glob } from "bun";
import ts from "typescript";

const VARIADIC = /(\.(push|unshift|splice)|\bMath\.(max|min)|\bString\.(fromCharCode|fromCodePoint))$/;

/** An array written out in place (`...(a ? [x, y] : [])`): its length is in the code. */
const literal = (node: ts.Expression): boolean =>
  ts.isArrayLiteralExpression(node) ||
  (ts.isParenthesizedExpression(node) && literal(node.expression)) ||
  (ts.isConditionalExpression(node) && literal(node.whenTrue) && literal(node.whenFalse));

function spreadArguments(path: string, text: string): string[] {
  const source = ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true, path.endsWith(".tsx") ? ts.ScriptKind.TSX : ts.ScriptKind.TS);
  const found: string[] = [];
  const visit = (node: ts.Node) => {
    if (ts.isSpreadElement(node) && ts.isCallExpression(node.parent) && VARIADIC.test(node.parent.expression.getText()) && !literal(node.expression)) {
      const { line } = source.getLineAndCharacterOfPosition(node.getStart());
      found.push(`${path}:${line + 1}: ${node.parent.getText().slice(0, 80)}`);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

describe("spread arguments", () => {
  test("the check finds a spread of data into push and Math.max, and nothing else", () => {
    const found = spreadArguments("probe.ts", "a.push(...b); Math.max(0, ...c.map(f)); a.push(...(x ? [1] : [])); and(...d); const e = [...g]; h({ ...i });");
    expect(found).toHaveLength(2);
  });

  test("no file of src/ spreads data into a variadic call", async () => {
    const found: string[] = [];
    for await (const path of new Glob("src/**/*.{ts,tsx}").scan(".")) found.push(...spreadArguments(path, await Bun.file(path).text()));
    expect(found).toEqual([]);
  });
});
