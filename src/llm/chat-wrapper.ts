/**
 * Which chat format a model speaks. node-llama-cpp finds it by rendering the model's Jinja
 * template against every format it knows: 0.3–0.4 s of blocking JS on every start, for an answer
 * that depends only on the model file. The answer (a wrapper type name) is remembered per model
 * in a small JSON file, and later starts ask for that type directly, which takes no time.
 */
import { readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { type ChatWrapper, chatWrappers, type LlamaModel, resolveChatWrapper } from "node-llama-cpp";

type WrapperType = keyof typeof chatWrappers;

const CACHE_FILE = "chat-wrappers.json";

/** Everything the detection reads from the file: the template, and the names it falls back on. */
function modelKey(model: LlamaModel): string {
  const { general, tokenizer } = model.fileInfo.metadata;
  const identity = [tokenizer?.chat_template ?? "", general?.architecture ?? "", general?.name ?? "", model.tokens.bosString ?? ""];
  return new Bun.CryptoHasher("sha256").update(JSON.stringify(identity)).digest("hex");
}

function readCache(file: string): Record<string, WrapperType> {
  try {
    return JSON.parse(readFileSync(file, "utf8")) as Record<string, WrapperType>;
  } catch {
    return {};
  }
}

/** Resolves the model's chat wrapper, detecting it only the first time a `cacheDir` sees the model. */
export function resolveModelChatWrapper(model: LlamaModel, cacheDir?: string): ChatWrapper {
  if (cacheDir === undefined) return resolveChatWrapper(model);
  const file = join(cacheDir, CACHE_FILE);
  const cache = readCache(file);
  const key = modelKey(model);
  const known = cache[key];
  if (known !== undefined && known in chatWrappers) return resolveChatWrapper(model, { type: known });

  const detected = resolveChatWrapper(model);
  const type = (Object.keys(chatWrappers) as WrapperType[]).find((name) => detected instanceof chatWrappers[name]);
  if (type !== undefined) {
    try {
      // Written aside and renamed: a concurrent start reads the old file or the new one, never half.
      const temporary = `${file}.${process.pid}.tmp`;
      writeFileSync(temporary, JSON.stringify({ ...cache, [key]: type }));
      renameSync(temporary, file);
    } catch {
      // Only the next start's speed depends on it.
    }
  }
  return detected;
}
