/**
 * Where a chat format says a reply ends, besides the model's end-of-generation tokens: its stop
 * triggers. A trigger that is one special token (ChatML's `<|im_end|>`) is matched on the token;
 * any other is matched on the reply's text, because it spans several tokens and the same text can
 * be spelled by different ones (the general format's `\n\n### Human`, used for a model without a
 * usable template). LlamaChat stops on both kinds; the engine drives decoding itself, so it must too.
 */
import { type ChatWrapper, type LlamaModel, LlamaText, SpecialTokensText, type Token } from "node-llama-cpp";

export interface ChatStops {
  tokens: ReadonlySet<Token>;
  texts: readonly string[];
  /**
   * Whether a sampled token ends the reply: one of `tokens`, or one of the model's
   * end-of-generation tokens (asked once per token id: asking is a native call, on every token).
   */
  endsReply(token: Token): boolean;
}

export function chatStops(model: LlamaModel, chatWrapper: ChatWrapper): ChatStops {
  const { stopGenerationTriggers } = chatWrapper.generateContextState({ chatHistory: [] });
  const tokens = new Set<Token>();
  const texts = new Set<string>();
  for (const trigger of stopGenerationTriggers) {
    const tokenized = LlamaText(trigger).tokenize(model.tokenizer, "trimLeadingSpace");
    if (tokenized.length === 1 && (model.isSpecialToken(tokenized[0]) || model.isEogToken(tokenized[0]))) tokens.add(tokenized[0]!);
    else if (tokenized.length > 0) {
      const text = plainText(LlamaText(trigger));
      if (text !== undefined && text !== "") texts.add(text);
    }
  }
  const endOfGeneration = new Map<Token, boolean>();
  const endsReply = (token: Token) => {
    if (tokens.has(token)) return true;
    let ends = endOfGeneration.get(token);
    if (ends === undefined) endOfGeneration.set(token, (ends = model.isEogToken(token)));
    return ends;
  };
  return { tokens, texts: [...texts], endsReply };
}

/** The trigger's text, if it is all text; a trigger naming a special token by role (EOS) has none. */
function plainText(trigger: LlamaText): string | undefined {
  let text = "";
  for (const value of trigger.values) {
    if (typeof value === "string") text += value;
    else if (value instanceof SpecialTokensText) text += value.value;
    else return undefined;
  }
  return text;
}
