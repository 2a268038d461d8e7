/**
 * Images in prompts. A turn's pictures go into its text as markers (a secret of this engine's,
 * with the picture's SHA-256), so rendering, fitting and transcripts handle them as text; the
 * tokenizer then puts in each marker's place the picture's layout as llama.cpp's mtmd tokenizes it
 * (natives/vision.ts): the projector's text around it, and one placeholder token per position of
 * each image chunk. A placeholder is no token of the vocabulary (it is negative) and names its
 * picture and chunk, so a prompt reuses a sequence's image cells exactly where it has the same
 * picture at the same place, as it reuses text; the scheduler evaluates a run of placeholders
 * through the projector (`PromptImage`).
 */
import { createHash, randomBytes } from "node:crypto";
import type { LlamaContext, Token, Tokenizer } from "node-llama-cpp";
import { append } from "../append";
import { InvalidInput } from "../errors";
import { type ImageChunk, imageLayout } from "../natives/vision";
import type { Turn } from "./types";

/** A run of a prompt's placeholders the projector evaluates: chunk `chunk` of the picture `data`'s layout. */
export interface PromptImage {
  data: Uint8Array;
  chunk: number;
  positions: number;
}

/** A request's pictures, held while its prompt is tokenized and evaluated. */
export interface HeldImages {
  /** The history with each picture's marker in its turn's text. */
  turns: Turn[];
  /** What each placeholder of the prompt stands for. */
  images: ReadonlyMap<Token, PromptImage>;
  /** A placeholder of each picture of the newest turn, with its place among the history's pictures: a prompt that lacks one has cut it off. */
  newest: readonly { placeholder: Token; index: number }[];
  release(): void;
}

/** Whether any turn has a picture. */
export const hasImages = (history: readonly Turn[]) => history.some((turn) => (turn.images?.length ?? 0) > 0);

/** A history without pictures, held as one with them is. */
export const withoutImages = (history: readonly Turn[]): HeldImages => ({ turns: [...history], images: new Map(), newest: [], release: () => {} });

export class PromptImages {
  private readonly marker: string;
  private readonly pattern: RegExp;
  /** The layouts of the pictures that requests in flight hold, by SHA-256. */
  private readonly layouts = new Map<string, { chunks: readonly ImageChunk[]; holds: number }>();

  constructor(private readonly context: LlamaContext) {
    this.marker = `<__parley_image_${randomBytes(8).toString("hex")}_`;
    this.pattern = new RegExp(`${this.marker}([0-9a-f]{64})__>`, "g");
  }

  /**
   * The history's pictures, laid out by the projector (one that is no picture it can decode is
   * `InvalidInput` naming it), and the history with their markers. Release once the prompt is
   * evaluated.
   */
  async hold(history: readonly Turn[]): Promise<HeldImages> {
    if (!hasImages(history)) return withoutImages(history);
    const held: string[] = [];
    const release = () => {
      for (const hash of held.splice(0)) {
        const layout = this.layouts.get(hash)!;
        if (--layout.holds === 0) this.layouts.delete(hash);
      }
    };
    const images = new Map<Token, PromptImage>();
    const newest: { placeholder: Token; index: number }[] = [];
    let index = 0;
    try {
      const turns: Turn[] = [];
      for (const [item, turn] of history.entries()) {
        if (!turn.images?.length) {
          turns.push(turn);
          continue;
        }
        let content = "";
        let from = 0;
        for (const { data, at } of turn.images) {
          if (at < from || at > turn.content.length) throw new Error("a turn's pictures stand in its text, in order");
          const hash = createHash("sha256").update(data).digest("hex");
          const chunks = await this.layoutOf(hash, data, { part: "image", index });
          held.push(hash);
          for (const [chunk, piece] of chunks.entries()) {
            if (piece.kind === "image") images.set(placeholder(hash, chunk), { data, chunk, positions: piece.positions });
          }
          if (item === history.length - 1)
            newest.push({
              placeholder: placeholder(
                hash,
                chunks.findIndex(({ kind }) => kind === "image"),
              ),
              index,
            });
          content += `${turn.content.slice(from, at)}${this.marker}${hash}__>`;
          from = at;
          index++;
        }
        const { images: _, ...rest } = turn;
        turns.push({ ...rest, content: content + turn.content.slice(from) });
      }
      return { turns, images, newest, release };
    } catch (error) {
      release();
      throw error;
    }
  }

  /**
   * `tokenizer`, with each marker in a text tokenized as its picture's layout, and the text after it
   * tokenized on its own, as mtmd tokenizes the texts between its markers.
   */
  tokenizer(tokenizer: Tokenizer): Tokenizer {
    const tokenize = (text: string, specialTokens?: boolean | "builtin", options?: "trimLeadingSpace"): Token[] => {
      if (specialTokens === "builtin" || !text.includes(this.marker)) return tokenizer(text as never, specialTokens as never, options);
      const tokens: Token[] = [];
      let from = 0;
      for (const match of text.matchAll(this.pattern)) {
        if (match.index > from) append(tokens, tokenizer(text.slice(from, match.index), specialTokens === true, from === 0 ? options : undefined));
        append(tokens, this.tokensOf(match[1]!));
        from = match.index + match[0].length;
      }
      if (from < text.length) append(tokens, tokenizer(text.slice(from), specialTokens === true, from === 0 ? options : undefined));
      return tokens;
    };
    return Object.assign(tokenize as Tokenizer, {
      detokenize: tokenizer.detokenize,
      isSpecialToken: tokenizer.isSpecialToken,
      isEogToken: tokenizer.isEogToken,
    });
  }

  private async layoutOf(hash: string, data: Uint8Array, field: { part: "image"; index: number }): Promise<readonly ImageChunk[]> {
    const known = this.layouts.get(hash);
    // Laid out again for each request, even where another holds it: a layout found at once would
    // tell a user that another had just sent the same picture.
    const chunks = await imageLayout(this.context, data).catch((error: unknown) => {
      throw new InvalidInput(field, `picture ${field.index + 1} is none the model can see: ${error instanceof Error ? error.message : String(error)}`);
    });
    if (known) known.holds++;
    else this.layouts.set(hash, { chunks, holds: 1 });
    return chunks;
  }

  private tokensOf(hash: string): Token[] {
    const layout = this.layouts.get(hash);
    if (!layout) throw new Error("a picture's marker outlived its hold");
    const tokens: Token[] = [];
    for (const [chunk, piece] of layout.chunks.entries()) {
      if (piece.kind === "text") append(tokens, piece.tokens);
      else append(tokens, new Array<Token>(piece.positions).fill(placeholder(hash, chunk)));
    }
    return tokens;
  }
}

/** A negative id per picture (its SHA-256) and chunk: two pictures share one with a chance of one in 2^31. */
function placeholder(hash: string, chunk: number): Token {
  return -(1 + ((Number.parseInt(hash.slice(0, 8), 16) + chunk) % 0x7fffffff)) as Token;
}
