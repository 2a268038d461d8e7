/**
 * Unpacking the models an executable carries, with plain files standing in for its embedded ones
 * (a start reads both through Bun.file): written once, verified, never rewritten while intact,
 * rewritten when damaged, refused with the need named when the disk has no room.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { CarriedFile } from "../../src/carried/models";
import { UnpackError, unpackCarried } from "../../src/carried/unpack";
import { withSeed } from "../support/random";

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** A carried file of random bytes (its asset in a directory of its own) and an empty data directory. */
function carried(bytes: Uint8Array, name = "model.gguf"): { file: CarriedFile; dataDir: string } {
  const dir = mkdtempSync("/tmp/parley-carried-");
  dirs.push(dir);
  const asset = join(dir, "asset");
  writeFileSync(asset, bytes);
  const sha256 = new Bun.CryptoHasher("sha256").update(bytes).digest("hex");
  return { file: { name, asset, sha256, bytes: bytes.length }, dataDir: join(dir, "data") };
}

const randomBytes = (next: () => number, length: number) => Uint8Array.from({ length }, () => Math.floor(next() * 256));

describe("unpacking the carried models", () => {
  test(
    "writes each file once under its sha256 with its own name; a later start finds it intact and writes nothing",
    withSeed(async (random) => {
      const bytes = randomBytes(random.next, random.int(1, 3 * 2 ** 20));
      const { file, dataDir } = carried(bytes);
      const projector = carried(randomBytes(random.next, 1000), "mmproj-model.gguf").file;
      const model = { ...file, id: "m", projector };

      const first = await unpackCarried([model], dataDir);
      const path = join(dataDir, "carried", file.sha256, "model.gguf");
      const projectorPath = join(dataDir, "carried", projector.sha256, "mmproj-model.gguf");
      expect(first).toEqual({ paths: [`${path}+${projectorPath}`], written: [path, projectorPath] });
      expect(await Bun.file(path).bytes()).toEqual(bytes);
      const { ino } = statSync(path);

      const again = await unpackCarried([model], dataDir);
      expect(again).toEqual({ paths: first.paths, written: [] });
      expect(statSync(path).ino).toBe(ino);
    }),
  );

  test(
    "a copy changed since it was verified is hashed again: the same bytes are kept, other bytes unpacked again",
    withSeed(async (random) => {
      const bytes = randomBytes(random.next, 4096);
      const { file, dataDir } = carried(bytes);
      const model = { ...file, id: "m" };
      const [path] = (await unpackCarried([model], dataDir)).paths;

      // Rewritten with the same bytes: a new time, the same content, so nothing to unpack.
      writeFileSync(path!, bytes);
      expect((await unpackCarried([model], dataDir)).written).toEqual([]);

      const damaged = bytes.slice();
      const at = random.int(0, damaged.length - 1);
      damaged[at] = damaged[at]! ^ 0xff;
      writeFileSync(path!, damaged);
      expect((await unpackCarried([model], dataDir)).written).toEqual([path!]);
      expect(await Bun.file(path!).bytes()).toEqual(bytes);

      writeFileSync(path!, bytes.subarray(1));
      expect((await unpackCarried([model], dataDir)).written).toEqual([path!]);
      expect(await Bun.file(path!).bytes()).toEqual(bytes);
    }),
  );

  test(
    "a file that does not hash to its recorded sha256 is refused as damaged and leaves nothing behind",
    withSeed(async (random) => {
      const { file, dataDir } = carried(randomBytes(random.next, 1000));
      const wrong = { ...file, id: "m", sha256: "0".repeat(64) };
      const unpacking = unpackCarried([wrong], dataDir);
      await expect(unpacking).rejects.toThrow(UnpackError);
      await expect(unpacking).rejects.toThrow(`not the ${"0".repeat(64)} it was built with: the executable is damaged`);
      expect(readdirSync(join(dataDir, "carried", wrong.sha256))).toEqual([]);
    }),
  );

  test("without room for a file it refuses before writing, naming the size needed and PARLEY_DATA_DIR", async () => {
    const { file, dataDir } = carried(new Uint8Array(10));
    // Larger than any disk here: the check reads the recorded size, not the asset.
    const huge = { ...file, id: "m", bytes: 2 ** 50 };
    const unpacking = unpackCarried([huge], dataDir);
    await expect(unpacking).rejects.toThrow(UnpackError);
    await expect(unpacking).rejects.toThrow(
      /^no room to unpack the model this executable carries: model\.gguf needs 1125899974 MB free in .*, which has \d+ MB \(.*PARLEY_DATA_DIR\)$/,
    );
    expect(readdirSync(join(dataDir, "carried", file.sha256))).toEqual([]);
  });

  test(
    "removes the copies of models it no longer carries and the temp files of starts that died, not a running start's",
    withSeed(async (random) => {
      const { file, dataDir } = carried(randomBytes(random.next, 100));
      const root = join(dataDir, "carried");
      const older = join(root, "a".repeat(64));
      mkdirSync(older, { recursive: true });
      writeFileSync(join(older, "old.gguf"), "old");
      const own = join(root, file.sha256);
      mkdirSync(own);
      // pid 2^22 + 1 is above Linux's largest pid: its writer is not running.
      const died = join(own, `.tmp-${2 ** 22 + 1}-model.gguf`);
      const running = join(own, `.tmp-${process.ppid}-model.gguf`);
      writeFileSync(died, "part");
      writeFileSync(running, "part");
      mkdirSync(join(root, "not-ours"));

      await unpackCarried([{ ...file, id: "m" }], dataDir);
      expect(existsSync(older)).toBe(false);
      expect(existsSync(died)).toBe(false);
      expect(existsSync(running)).toBe(true);
      expect(readdirSync(root).sort()).toEqual([file.sha256, "not-ours"].sort());
    }),
  );
});
