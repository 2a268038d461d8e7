/**
 * Which patterns the grammar holds exactly (anchored, regular, characters a JSON string holds
 * unescaped) and which it refuses to pretend to: a pattern outside the subset gives no rule, so a
 * strict schema with it is refused and a non-strict one takes it as advisory.
 */
import { describe, expect, test } from "bun:test";
import { patternRule } from "../../src/llm/pattern-grammar";

describe("patternRule", () => {
  test.each([
    ["^[A-Z]{3}-\\d{2,4}$", '"\\"" [A-Z]{3} "-" [0-9]{2,4} "\\""'],
    ["^(?:cat|dog)s?$", '"\\"" (("c" "a" "t" | "d" "o" "g")) "s"? "\\""'],
    ["^a.b$", '"\\"" "a" [^"\\\\\\x7F\\x00-\\x1F] "b" "\\""'],
    ["^[a-z_.-]+@x\\.com$", '"\\"" [a-z_.-]+ "@" "x" "." "c" "o" "m" "\\""'],
    ["^\\w{1,5}$", '"\\"" [a-zA-Z0-9_]{1,5} "\\""'],
  ])("%s is the rule %s", (pattern, rule) => {
    expect(patternRule(pattern, 1000)).toBe(rule);
  });

  test.each([
    ["unanchored", "[A-Z]+"],
    ["anchored at one end", "^ab"],
    ["a lookahead", "^(?=a)a$"],
    ["a back-reference", "^(a)\\1$"],
    ["a negated class", "^[^a]$"],
    ["whitespace as \\s", "^a\\sb$"],
    ["a word boundary", "^a\\b$"],
    ["a lazy quantifier", "^a+?$"],
    ["a quote", '^a"b$'],
    ["a repetition past the limit", "^x{1001}$"],
    ["a bound below its minimum", "^x{3,2}$"],
    ["an unclosed group", "^(ab$"],
    ["an unclosed class", "^[ab$"],
  ])("%s (%s) gives no rule", (_, pattern) => {
    expect(patternRule(pattern, 1000)).toBeUndefined();
  });
});
