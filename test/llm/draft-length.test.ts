/**
 * The draft length replies stepping together verify (src/llm/draft-length.ts): none where guesses
 * are often wrong, longer the likelier they are right, shorter the more replies share the batch.
 */
import { expect, test } from "bun:test";
import { AcceptancePriors, DraftLength, draftLength } from "../../src/llm/draft-length";

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

test("a reply's guesses start where its user's last reply's ended, never another user's", () => {
  const priors = new AcceptancePriors();
  const fresh = priors.for("alice").acceptance;
  const quoting = priors.for("alice");
  quoting.update(32, 32);
  priors.remember("alice", quoting);
  expect(priors.for("alice").acceptance).toBe(quoting.acceptance);
  expect(priors.for("bob").acceptance).toBe(fresh);
  // A single reply drafts from its first step where its user's replies repeat their context, and not where they do not.
  expect(draftLength([priors.for("alice").acceptance], 500)).toBeGreaterThan(0);
  const unlike = priors.for("carol");
  unlike.update(32, 2);
  priors.remember("carol", unlike);
  expect(draftLength([priors.for("carol").acceptance], 500)).toBe(0);
  expect(draftLength([fresh], 500)).toBeGreaterThan(0);
});

test("a user's acceptance is kept for the most recent few thousand users", () => {
  const priors = new AcceptancePriors();
  const right = priors.for("first");
  right.update(32, 32);
  priors.remember("first", right);
  for (let user = 0; user < 4096; user++) priors.remember(`user-${user}`, priors.for(`user-${user}`));
  expect(priors.for("first").acceptance).toBe(new DraftLength().acceptance);
});
