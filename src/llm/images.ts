/**
 * Images in prompts. A turn's pictures go into its text as markers (a secret of this engine's,
 * with the picture's SHA-256), so rendering, fitting and transcripts handle them as text; the
 * tokenizer then puts in each marker's place the picture's layout as llama.cpp's mtmd tokenizes it
 * (natives/vision.ts): the projector's text around it, and one placeholder token per position of
 * each image chunk. A placeholder is no token of the vocabulary (it is negative) and names its
 * picture, its chunk, and which showing of the picture in its turn it is (so that a turn showing one
 * picture twice has each showing's tokens, and a prompt that cut one off lacks them), so a prompt
 * reuses a sequence's image cells exactly where it has the same picture at the same place, as it
 * reuses text; the scheduler evaluates a run of placeholders
 * through the projector (an `ImagePiece`). A picture is laid out (decoded, resized, tokenized) once
 * per user: its layout is kept, and the natives keep it prepared for its evaluation, under a key of
 * that user's, so that another user's identical picture finds nothing sooner.
 */
import { createHash, randomBytes } from "node:crypto";
import type { LlamaContext, Token, Tokenizer } from "node-llama-cpp";
import { append } from "../append";
import { InvalidInput } from "../errors";
import { type ImageChunk, type ImagePiece, imageLayout } from "../natives/vision";
import type { Turn } from "./types";

/** Layouts kept beyond the requests holding them, the least recently used dropped first. */
const LAYOUTS_KEPT = 256;

/** A request's pictures, held while its prompt is tokenized and evaluated. */
export interface HeldImages {
  /** The history with each picture's marker in its turn's text. */
  turns: Turn[];
  /** What each placeholder of the prompt stands for. */
  images: ReadonlyMap<Token, ImagePiece>;
  /** A placeholder of each picture of the newest turn (each showing of one picture its own), with its place among the history's pictures: a prompt that lacks one has cut it off. */
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
  /**
   * Pictures' layouts by their key (the user's scope and the picture's SHA-256), least recently
   * used first: those requests in flight hold, and the last few others.
   */
  private readonly layouts = new Map<string, { chunks: readonly ImageChunk[]; holds: number }>();

  constructor(private readonly context: LlamaContext) {
    this.marker = `<__parley_image_${randomBytes(8).toString("hex")}_`;
    this.pattern = new RegExp(`${this.marker}([0-9a-f]{64})_(\\d+)__>`, "g");
  }

  /**
   * The history's pictures, laid out by the projector (one that is no picture it can decode is
   * `InvalidInput` naming it), and the history with their markers. Release once the prompt is
   * evaluated.
   */
  async hold(history: readonly Turn[], scope: string): Promise<HeldImages> {
    if (!hasImages(history)) return withoutImages(history);
    const held: string[] = [];
    const release = () => {
      for (const key of held.splice(0)) this.layouts.get(key)!.holds--;
      this.trim();
    };
    const images = new Map<Token, ImagePiece>();
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
        const showings = new Map<string, number>();
        for (const { data, at } of turn.images) {
          if (at < from || at > turn.content.length) throw new Error("a turn's pictures stand in its text, in order");
          const hash = createHash("sha256").update(data).digest("hex");
          const key = keyOf(scope, hash);
          const chunks = await this.layoutOf(key, data, { part: "image", index });
          held.push(key);
          const showing = showings.get(hash) ?? 0;
          showings.set(hash, showing + 1);
          for (const [chunk, piece] of chunks.entries()) {
            if (piece.kind === "image") images.set(placeholder(hash, chunk, showing), { image: data, key, chunk, positions: piece.positions });
          }
          if (item === history.length - 1)
            newest.push({
              placeholder: placeholder(
                hash,
                chunks.findIndex(({ kind }) => kind === "image"),
                showing,
              ),
              index,
            });
          content += `${turn.content.slice(from, at)}${this.marker}${hash}_${showing}__>`;
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

  /** `text` without its pictures' markers. */
  withoutMarkers(text: string): string {
    return text.includes(this.marker) ? text.replace(this.pattern, "") : text;
  }

  /**
   * `tokenizer`, with each marker in a text tokenized as its picture's layout, and the text after it
   * tokenized on its own, as mtmd tokenizes the texts between its markers.
   */
  tokenizer(tokenizer: Tokenizer, scope: string): Tokenizer {
    const tokenize = (text: string, specialTokens?: boolean | "builtin", options?: "trimLeadingSpace"): Token[] => {
      if (specialTokens === "builtin" || !text.includes(this.marker)) return tokenizer(text as never, specialTokens as never, options);
      const tokens: Token[] = [];
      let from = 0;
      for (const match of text.matchAll(this.pattern)) {
        if (match.index > from) append(tokens, tokenizer(text.slice(from, match.index), specialTokens === true, from === 0 ? options : undefined));
        append(tokens, this.tokensOf(scope, match[1]!, Number(match[2])));
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

  /** The picture's layout, held: found when its user laid it out lately, else asked of the natives. */
  private async layoutOf(key: string, data: Uint8Array, field: { part: "image"; index: number }): Promise<readonly ImageChunk[]> {
    let layout = this.layouts.get(key);
    if (!layout) {
      const chunks = await imageLayout(this.context, data, key).catch((error: unknown) => {
        throw new InvalidInput(field, `picture ${field.index + 1} is none the model can see: ${error instanceof Error ? error.message : String(error)}`);
      });
      layout = this.layouts.get(key) ?? { chunks, holds: 0 };
    }
    layout.holds++;
    // Most recently used last.
    this.layouts.delete(key);
    this.layouts.set(key, layout);
    return layout.chunks;
  }

  /** Drops the least recently used layouts no request holds, beyond the ones kept. */
  private trim(): void {
    for (const [key, layout] of this.layouts) {
      if (this.layouts.size <= LAYOUTS_KEPT) return;
      if (layout.holds === 0) this.layouts.delete(key);
    }
  }

  private tokensOf(scope: string, hash: string, showing: number): Token[] {
    const layout = this.layouts.get(keyOf(scope, hash));
    if (!layout) throw new Error("a picture's marker outlived its hold");
    const tokens: Token[] = [];
    for (const [chunk, piece] of layout.chunks.entries()) {
      if (piece.kind === "text") append(tokens, piece.tokens);
      else append(tokens, new Array<Token>(piece.positions).fill(placeholder(hash, chunk, showing)));
    }
    return tokens;
  }
}

/** A picture's key: its user's scope and its SHA-256, so that no user finds another's picture laid out or prepared. */
const keyOf = (scope: string, hash: string) => `${scope}:${hash}`;

/** Chunks a layout has at most, below any showing's: mtmd lays a picture out in a few. */
const CHUNKS_APART = 0x10000;

/**
 * A negative id per picture (its SHA-256), chunk and showing in its turn: two pictures share one
 * with a chance of one in 2^31.
 */
function placeholder(hash: string, chunk: number, showing: number): Token {
  return -(1 + ((Number.parseInt(hash.slice(0, 8), 16) + showing * CHUNKS_APART + chunk) % 0x7fffffff)) as Token;
}
