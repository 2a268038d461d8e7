/**
 * Filling in the middle (code completion in an editor): the text before the cursor, the text after
 * it, the middle's start the client already has and other files for context, made into the prompt
 * a model trained for it reads between its FIM tokens. Assembled token for token as llama-server's
 * `/infill` does (`format_prompt_infill`, tools/server/server-common.cpp), so that an editor gets
 * the completion it gets there:
 *
 *   [REP]myproject\n [SEP]name\n text … [SEP]filename\n [BOS] [PRE]before start [SUF]after [MID]
 *
 * each text tokenized on its own without parsing special tokens' texts (the middle's start with
 * them); the repository and file-separator tokens only where the model has them (else a plain
 * separator line before each file); the text before cut to its last three quarters of a batch,
 * the text after to the first quarter less the start's tokens and 2, and the files to their last
 * tokens, as many as the context holds beyond a batch (and, unlike llama-server, no more than the
 * prompt's room leaves: where its prompt would not fit, Parley's takes fewer of them).
 */
import type { LlamaModel, Token, Tokenizer } from "node-llama-cpp";
import { append } from "../append";
import { InvalidInput } from "../errors";

export interface InfillFile {
  /** Its name, as the prompt shows it before its text. */
  name: string;
  text: string;
}

/** What a completion fills in between. */
export interface Infill {
  /** The text before the insertion point. */
  before: string;
  /** The text after it. */
  after: string;
  /** The middle's start, as the client has it already: its special tokens' texts are those tokens. */
  start: string;
  /** Other files, shown before the file's own text, oldest first (the newest are kept when they do not all fit). */
  files: readonly InfillFile[];
}

/** The tokens a model trained to fill in the middle reads them between. */
export interface FimTokens {
  prefix: Token;
  suffix: Token;
  middle: Token;
  /** Opens the repository's name, before the files. */
  repository?: Token;
  /** Opens each file's name. */
  file?: Token;
  /** Added before the prefix token, where the model adds a bos to its input. */
  bos?: Token;
}

/** llama-server's constants: it names the repository and the completed file so. */
const REPOSITORY_LINE = "myproject\n";
const OWN_FILE_LINE = "filename\n";
/** Before each file, where the model has no file-separator token. */
const FILE_BREAK = "\n\n--- snippet ---\n\n";

/** Token texts llama.cpp takes for the repository and file-separator tokens when the file's metadata names none (src/llama-vocab.cpp). */
const REPOSITORY_TEXTS = ["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"];
const FILE_TEXTS = ["<|file_sep|>"];

/**
 * The model's FIM tokens as llama.cpp resolves them (the `tokenizer.ggml.fim_*_token_id` keys, else
 * tokens of known texts); undefined when it lacks a prefix, suffix or middle token.
 */
export function fimTokensOf(model: LlamaModel): FimTokens | undefined {
  const { prefix, suffix, middle } = model.tokens.infill;
  if (prefix === null || suffix === null || middle === null) return undefined;
  const ggml = model.fileInfo.metadata.tokenizer.ggml as { tokens?: readonly string[] } & Record<string, unknown>;
  const named = (key: string, texts: readonly string[]): Token | undefined => {
    const id = ggml[key];
    if (typeof id === "number") return id as Token;
    for (const text of texts) {
      const index = ggml.tokens?.indexOf(text) ?? -1;
      if (index >= 0) return index as Token;
    }
    return undefined;
  };
  const repository = named("fim_rep_token_id", REPOSITORY_TEXTS);
  const file = named("fim_sep_token_id", FILE_TEXTS);
  const { bos, shouldPrependBosToken } = model.tokens;
  return {
    prefix,
    suffix,
    middle,
    ...(repository !== undefined ? { repository } : {}),
    ...(file !== undefined ? { file } : {}),
    ...(shouldPrependBosToken && bos !== null ? { bos } : {}),
  };
}

/** What bounds an infill's prompt. */
export interface InfillRoom {
  /** The prompt chunk the engine evaluates at once (llama-server's batch). */
  batch: number;
  /** The context the prompt and reply share. */
  context: number;
  /** The most tokens the prompt may take beside the reply's room. */
  budget: number;
}

/** The infill's prompt tokens; `InvalidInput` when even without the other files it outgrows the budget. */
export function infillTokens(infill: Infill, fim: FimTokens, tokenize: Tokenizer, room: InfillRoom): Token[] {
  const plain = (text: string) => tokenize(text, false);
  const start = tokenize(infill.start, true);
  const before = plain(infill.before);
  const after = plain(infill.after);
  const quarter = Math.floor(room.batch / 4);
  const beforeKept = before.slice(before.length - Math.min(before.length, 3 * quarter));
  const afterKept = after.slice(0, Math.max(0, quarter - (2 + start.length)));
  const own = [...(fim.bos !== undefined ? [fim.bos] : []), fim.prefix, ...beforeKept, ...start, fim.suffix, ...afterKept, fim.middle];
  if (own.length > room.budget) {
    throw new InvalidInput(
      { part: "infill", detail: "start" },
      `the text to fill in takes ${own.length} tokens, more than the ${room.budget} the context leaves beside the reply's room`,
    );
  }
  const files = filesTokens(infill.files, fim, plain);
  // llama-server's own default of no reply limit (n_predict -1) makes this 2 more than the context beyond a batch.
  const filesKept = Math.min(Math.max(0, room.context - room.batch + 2), files.length, room.budget - own.length);
  return [...files.slice(files.length - filesKept), ...own];
}

/** The other files, and the completed file's name, as llama-server lays them out before the prefix token. */
function filesTokens(files: readonly InfillFile[], fim: FimTokens, plain: (text: string) => Token[]): Token[] {
  const tokens: Token[] = [];
  const push = (more: readonly Token[]) => append(tokens, more);
  if (fim.repository !== undefined) push([fim.repository, ...plain(REPOSITORY_LINE)]);
  for (const file of files) {
    push(fim.file !== undefined ? [fim.file, ...plain(`${file.name}\n`)] : plain(FILE_BREAK));
    push(plain(file.text));
  }
  if (fim.file !== undefined) push([fim.file, ...plain(OWN_FILE_LINE)]);
  return tokens;
}
