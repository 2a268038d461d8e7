/**
 * `bun run tools/vision-fixture.ts`: what llama-server (built from the llama.cpp source
 * node-llama-cpp bundles, bench/perf/yardstick.ts) answers at temperature 0 for each of
 * test/support/vision.ts's pictures, on the vision preset and its projector (`--mmproj`), written
 * to test/fixtures/llama-server-vision.json with both files' sha256. The proof that llama.cpp's
 * mtmd takes the generated pair, and what Parley's replies on images must equal (#51); a preset
 * whose bytes change fails test/llm/vision.test.ts until this is run again.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { startLlamaServer } from "../bench/perf/procs";
import { buildLlamaServer } from "../bench/perf/yardstick";
import { VISION_MODEL_NAME, writePresetModel } from "../src/gguf/presets";
import { projectorFileName } from "../src/gguf/vision";
import { fileSha256, tempDir } from "../test/support/files";
import { VISION_FIXTURE_PATH, VISION_IMAGES, VISION_PROMPT, VISION_REPLY_TOKENS, type VisionFixture } from "../test/support/vision";

const binary = await buildLlamaServer();
const dir = tempDir("vision-fixture");
const model = join(dir, `${VISION_MODEL_NAME}.gguf`);
const projector = join(dir, projectorFileName(`${VISION_MODEL_NAME}.gguf`));
await writePresetModel("vision", model);

const server = await startLlamaServer({ binary, model, threads: 1, parallel: 1, contextSize: 1024, flags: ["--mmproj", projector] });
const replies: VisionFixture["replies"] = {};
try {
  for (const [name, image] of Object.entries(VISION_IMAGES)) {
    const url = `data:image/png;base64,${Buffer.from(image()).toString("base64")}`;
    const response = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        messages: [
          {
            role: "user",
            content: [
              { type: "text", text: VISION_PROMPT },
              { type: "image_url", image_url: { url } },
            ],
          },
        ],
        temperature: 0,
        max_tokens: VISION_REPLY_TOKENS,
        logprobs: true,
      }),
    });
    if (!response.ok) throw new Error(`llama-server answered ${response.status}: ${await response.text()}`);
    const { choices } = (await response.json()) as {
      choices: { message: { content: string }; logprobs: { content: { token: string; logprob: number }[] } }[];
    };
    replies[name] = { content: choices[0]!.message.content, tokens: choices[0]!.logprobs.content.map(({ token, logprob }) => ({ token, logprob })) };
  }
} finally {
  await server.stop();
}
const fixture: VisionFixture = { model: await fileSha256(model), projector: await fileSha256(projector), replies };
writeFileSync(VISION_FIXTURE_PATH, `${JSON.stringify(fixture, null, 1)}\n`);
console.log(`wrote ${VISION_FIXTURE_PATH}`);
