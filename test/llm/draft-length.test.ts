/**
 * The draft length replies stepping together verify (src/llm/draft-length.ts): none where guesses
 * are often wrong, longer the likelier they are right, shorter the more replies share the batch.
 */
import { expect, test } from "bun:test";
import { DraftLength, draftLength } from "../../src/llm/draft-length";

test("no draft where guesses are right half the time or less; a long one where they are nearly always right", () => {
  expect(draftLength([0.3], 500)).toBe(0);
  expect(draftLength([0.5, 0.5, 0.5, 0.5], 500)).toBe(0);
  expect(draftLength([0.99], 500)).toBeGreaterThanOrEqual(24);
  // Within the batch's room.
  expect(draftLength([0.99], 6)).toBe(6);
});

test("the likelier the guesses, the longer the draft; the more replies stepping together, the shorter", () => {
  const lengths = [0.6, 0.7, 0.8, 0.9, 0.95].map((p) => draftLength([p], 500));
  expect(lengths).toEqual([...lengths].sort((a, b) => a - b));
  expect(lengths.at(-1)!).toBeGreaterThan(lengths[0]!);
  const shared = [1, 4, 8].map((n) =>
    draftLength(
      Array.from({ length: n }, () => 0.9),
      500,
    ),
  );
  expect(shared).toEqual([...shared].sort((a, b) => b - a));
  expect(shared[0]!).toBeGreaterThan(shared[2]!);
  // One reply whose guesses fail holds the others' shared draft back.
  expect(draftLength([0.95, 0.95, 0.95, 0.1], 500)).toBeLessThan(draftLength([0.95, 0.95, 0.95, 0.95], 500));
});

test("a draft model's guesses cost its steps: the heavier it is, the shorter the draft that pays", () => {
  const lengths = [0, 0.05, 0.2, 0.5].map((weight) => draftLength([0.9], 500, false, weight));
  expect(lengths).toEqual([...lengths].sort((a, b) => b - a));
  expect(lengths[0]!).toBeGreaterThan(lengths[2]!);
  // As heavy as the served model: guessing never pays, even when nearly always right.
  expect(draftLength([0.95], 500, false, 1)).toBe(0);
});

test("lookup drafts at least a token where auto would not", () => {
  expect(draftLength([0.2], 500, true)).toBe(1);
  expect(draftLength([0.2], 0, true)).toBe(0);
});

test("a reply's acceptance follows how often its guesses were right, the more guesses the faster", () => {
  const reply = new DraftLength();
  const before = reply.acceptance;
  reply.update(0, 0);
  expect(reply.acceptance).toBe(before);
  reply.update(32, 32);
  expect(reply.acceptance).toBe(1);
  reply.update(4, 0);
  expect(reply.acceptance).toBe(0.75);
  reply.update(16, 0);
  expect(reply.acceptance).toBe(0);
});
