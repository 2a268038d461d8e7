/**
 * Which chat format a model speaks. node-llama-cpp finds it by rendering the model's Jinja
 * template against every format it knows: 0.3–0.4 s of blocking JS on every start, for an answer
 * that depends only on the model file. The answer (a wrapper type name) is remembered per model
 * in a small JSON file, and later starts ask for that type directly, which takes no time.
 */
import { readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  type ChatHistoryItem,
  type ChatWrapper,
  chatWrappers,
  getLlama,
  JinjaTemplateChatWrapper,
  LlamaLogLevel,
  type LlamaModel,
  resolveChatWrapper,
} from "node-llama-cpp";

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

/** Conversations a specialized format must render as the model's own template does, to be used instead of it. */
const DIALOGUE: ChatHistoryItem[] = [
  { type: "user", text: "Hi" },
  { type: "model", response: ["Hello."] },
  { type: "user", text: "Bye" },
  { type: "model", response: [] },
];
const PROBES: ChatHistoryItem[][] = [DIALOGUE, [{ type: "system", text: "Be brief." }, ...DIALOGUE]];

/**
 * node-llama-cpp renders the open reply through a template as an empty assistant message, which a
 * thinking template closes as a reply without thoughts; the template's own generation prompt
 * (`add_generation_prompt`) leaves the thought to the model. Not a difference of the format.
 */
const EMPTY_THOUGHT = "<think>\n\n</think>\n\n";

/**
 * node-llama-cpp's choice, unless it is a specialized format that renders a conversation otherwise
 * than the model's Jinja template (it accepts its Qwen format for Qwen2.5's template, which adds a
 * default system prompt, and its Llama 3.1 format, which writes today's date and tool
 * instructions): then the template itself, so the model sees the prompts it was trained on.
 */
function detect(model: LlamaModel): ChatWrapper {
  const detected = resolveChatWrapper(model);
  const template = model.fileInfo.metadata.tokenizer?.chat_template;
  if (detected instanceof JinjaTemplateChatWrapper || template === undefined || template.trim() === "") return detected;
  let jinja: JinjaTemplateChatWrapper;
  try {
    jinja = new JinjaTemplateChatWrapper({ template, tokenizer: model.tokenizer });
  } catch {
    return detected;
  }
  // A leading BOS is the tokenizer's business (add_bos_token), whether or not a template writes it.
  const render = (wrapper: ChatWrapper, chatHistory: ChatHistoryItem[]) => {
    try {
      const tokens = wrapper.generateContextState({ chatHistory }).contextText.tokenize(model.tokenizer);
      if (tokens[0] === model.tokens.bos) tokens.shift();
      const text = model.detokenize(tokens, true);
      return text.endsWith(EMPTY_THOUGHT) ? text.slice(0, -EMPTY_THOUGHT.length) : text;
    } catch {
      return undefined;
    }
  };
  const differs = PROBES.some((probe) => {
    const expected = render(jinja, probe);
    return expected !== undefined && render(detected, probe) !== expected;
  });
  return differs ? jinja : detected;
}

/** Resolves the model's chat wrapper, detecting it only the first time a `cacheDir` sees the model. */
export function resolveModelChatWrapper(model: LlamaModel, cacheDir?: string): ChatWrapper {
  if (cacheDir === undefined) return detect(model);
  const file = join(cacheDir, CACHE_FILE);
  const cache = readCache(file);
  const key = modelKey(model);
  const known = cache[key];
  if (known !== undefined && known in chatWrappers) return resolveChatWrapper(model, { type: known });

  const detected = detect(model);
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

/**
 * The chat format Parley resolves for the model file at `modelPath` (its vocabulary alone is
 * loaded). llama.cpp's log is kept back: a file it cannot read throws its reason, in one line.
 */
export async function chatFormatOf(modelPath: string): Promise<string> {
  const errors: string[] = [];
  const logger = (level: LlamaLogLevel, message: string) => void (level === LlamaLogLevel.error && errors.push(message.trim()));
  const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, logger });
  try {
    const model = await llama.loadModel({ modelPath, vocabOnly: true }).catch((error: unknown) => {
      const reason = errors.map((line) => /error loading model: (.*)/.exec(line)?.[1]).find((line) => line !== undefined);
      throw new Error(reason ?? errors[0] ?? String((error as Error)?.message ?? error));
    });
    try {
      const wrapper = detect(model);
      return wrapper instanceof JinjaTemplateChatWrapper
        ? "the model's Jinja template"
        : `${wrapper.wrapperName} (node-llama-cpp's, equivalent to the template)`;
    } finally {
      await model.dispose();
    }
  } finally {
    await llama.dispose();
  }
}
