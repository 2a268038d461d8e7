import { expect, test } from "bun:test";
import { DispatchGate } from "../../src/llm/dispatch-gate";
import { eventLoopTurns } from "../support";

const settled = async (promise: Promise<void>) => {
  let done = false;
  void promise.then(() => (done = true));
  await eventLoopTurns();
  return done;
};

test("without state I/O the gate is open at once, with no promise to wait on", () => {
  expect(new DispatchGate().open()).toBeUndefined();
});

test("a batch waits until all state I/O in progress has ended", async () => {
  const gate = new DispatchGate();
  const first = Promise.withResolvers<void>();
  const second = Promise.withResolvers<void>();
  const saves = [gate.hold(() => first.promise), gate.hold(() => second.promise)];
  const opened = gate.open()!;
  first.resolve();
  await saves[0];
  expect(await settled(opened)).toBe(false);
  second.resolve();
  await saves[1];
  expect(await settled(opened)).toBe(true);
  expect(gate.open()).toBeUndefined();
});

test("a failed save still opens the gate", async () => {
  const gate = new DispatchGate();
  const failing = gate.hold(() => Promise.reject(new Error("disk full")));
  const opened = gate.open()!;
  await expect(failing).rejects.toThrow("disk full");
  expect(await settled(opened)).toBe(true);
});

test("each hold calls the listeners as it begins, before its I/O, and the gate reads held until all end", async () => {
  const gate = new DispatchGate();
  const seen: string[] = [];
  gate.onHold(() => seen.push(`hold, held ${gate.held}`));
  expect(gate.held).toBe(false);
  const io = Promise.withResolvers<void>();
  const holds = [gate.hold(() => (seen.push("first I/O"), io.promise)), gate.hold(async () => void seen.push("second I/O"))];
  expect(seen).toEqual(["hold, held true", "first I/O", "hold, held true", "second I/O"]);
  await holds[1];
  expect(gate.held).toBe(true);
  io.resolve();
  await holds[0];
  expect(gate.held).toBe(false);
});
