import { expect, test } from "bun:test";
import { DispatchGate } from "../../src/llm/dispatch-gate";
import { until } from "../support";

test("a batch scheduled while state I/O runs is dispatched only after all of it has ended", async () => {
  const gate = new DispatchGate();
  const dispatched: string[] = [];
  const first = Promise.withResolvers<void>();
  const second = Promise.withResolvers<void>();
  const saves = [gate.hold(() => first.promise), gate.hold(() => second.promise)];
  gate.schedule(() => dispatched.push("held"));
  first.resolve();
  await saves[0];
  await new Promise((resolve) => setImmediate(resolve));
  expect(dispatched).toEqual([]);
  second.resolve();
  await saves[1];
  await until(() => dispatched.length === 1, "the held batch to be dispatched", 1_000);
  expect(dispatched).toEqual(["held"]);
});

test("without state I/O a batch is dispatched on the next cycle, and a failed save still releases the gate", async () => {
  const gate = new DispatchGate();
  const dispatched: string[] = [];
  gate.schedule(() => dispatched.push("free"));
  expect(dispatched).toEqual([]);
  await until(() => dispatched.length === 1, "the batch to be dispatched", 1_000);
  const failing = gate.hold(() => Promise.reject(new Error("disk full")));
  gate.schedule(() => dispatched.push("after failure"));
  await expect(failing).rejects.toThrow("disk full");
  await until(() => dispatched.length === 2, "the held batch to be dispatched", 1_000);
  expect(dispatched).toEqual(["free", "after failure"]);
});

test("a batch scheduled before state I/O began, but not yet dispatched, waits for it too", async () => {
  const gate = new DispatchGate();
  const dispatched: string[] = [];
  gate.schedule(() => dispatched.push("scheduled first"));
  const save = Promise.withResolvers<void>();
  const saving = gate.hold(() => save.promise);
  await new Promise((resolve) => setImmediate(resolve));
  await new Promise((resolve) => setImmediate(resolve));
  expect(dispatched).toEqual([]);
  save.resolve();
  await saving;
  await until(() => dispatched.length === 1, "the held batch to be dispatched", 1_000);
});
