/**
 * What `bun run build --embed-model` takes, judged before anything is built: each file read for its
 * header and hashed, a projector only after its model's `+`, and nothing past what Bun's executable
 * format can hold.
 */
import { describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { BUN_EXECUTABLE_LIMIT, carriedModels, checkCarriedSize } from "../../src/build/carry";
import { fileSha256, presetModel, tempDir } from "../support/files";

describe("the models a build carries", () => {
  test("a model, and a model with its projector: names, ids, sizes and sha256 from the files", async () => {
    const demo = await presetModel("demo");
    const vision = await presetModel("vision");
    const projector = join(vision, "..", `mmproj-${vision.split("/").at(-1)}`);
    const [plain, seeing] = await carriedModels(`${demo}, ${vision}+${projector}`);
    expect(plain).toMatchObject({ id: "parley-demo", source: demo, bytes: Bun.file(demo).size, sha256: await fileSha256(demo) });
    expect(plain).not.toHaveProperty("projector");
    expect(seeing).toMatchObject({ id: "parley-vision", projector: { source: projector, sha256: await fileSha256(projector) } });
  });

  test("a file that is no model, or a projector in a model's place, fails naming the file", async () => {
    const notGguf = join(tempDir("carry"), "notes.gguf");
    writeFileSync(notGguf, "<!DOCTYPE html>");
    await expect(carriedModels(notGguf)).rejects.toThrow(`--embed-model: ${notGguf}: is not a GGUF file`);
    const vision = await presetModel("vision");
    const projector = join(vision, "..", `mmproj-${vision.split("/").at(-1)}`);
    await expect(carriedModels(projector)).rejects.toThrow("is a projector: name it after its model's file, model.gguf+mmproj.gguf");
    await expect(carriedModels(`${vision}+${await presetModel("demo")}`)).rejects.toThrow("is no projector (mmproj)");
    await expect(carriedModels(" , ")).rejects.toThrow("--embed-model names no file");
  });

  test("past 4 GiB with the natives and code the build is refused, naming the limit", async () => {
    const [model] = await carriedModels(await presetModel("demo"));
    expect(() => checkCarriedSize([model!], 100 * 2 ** 20)).not.toThrow();
    const huge = { ...model!, bytes: BUN_EXECUTABLE_LIMIT - 100 * 2 ** 20 };
    expect(() => checkCarriedSize([huge], 100 * 2 ** 20)).toThrow(
      /^--embed-model: 3\.90 GiB of models is more than Bun's executable can hold \(4 GiB with the natives and code/,
    );
  });
});
