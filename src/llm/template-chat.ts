/**
 * Conversations with tools, rendered by the model's own Jinja template as llama-server's `--jinja`
 * renders them: OpenAI's messages (an assistant's `tool_calls`, `tool` results) and `tools`, the
 * template deciding how the model sees them. node-llama-cpp's chat wrappers know tools only in
 * their own forms (Mistral's template defeats their detection; Gemma's and Phi's get node-llama-
 * cpp's own call syntax), so requests with tools take this path, and plain ones the wrapper's.
 *
 * A template that shows no tools gets them described in the system prompt, with Hermes' call
 * form asked for, and calls and results in the history written in that form (tool-syntax.ts).
 */
import { Template } from "@huggingface/jinja";
import type { LlamaModel } from "node-llama-cpp";
import { InvalidInput } from "../errors";
import { CHATML_TEMPLATE } from "../gguf/chatml";
import { mistralId, type ToolSyntax, toolSyntaxOf } from "./tool-syntax";
import type { ToolFunction } from "./tools";
import type { Turn } from "./types";

type Message = Record<string, unknown> & { role: string; content: string };

export class TemplateChat {
  private readonly template: Template;
  private readonly bos: string;
  private readonly eos: string;
  private readonly prependBos: boolean;

  /** The model's own template; ChatML, as llama-server falls back on, for a model that has none. */
  static of(model: LlamaModel): TemplateChat {
    const template = model.fileInfo.metadata.tokenizer?.chat_template;
    const source = typeof template === "string" && template.trim() !== "" ? template : CHATML_TEMPLATE;
    return new TemplateChat(source, model, toolSyntaxOf(source));
  }

  constructor(
    source: string,
    model: LlamaModel,
    readonly syntax: ToolSyntax,
  ) {
    this.template = new Template(source);
    this.bos = model.tokens.bosString ?? "";
    this.eos = model.tokens.eosString ?? "";
    this.prependBos = model.tokens.shouldPrependBosToken && this.bos !== "";
  }

  /**
   * `turns` and the tools, ending where the assistant's reply begins, as text whose special tokens'
   * texts are those tokens (llama-server tokenizes it so); a BOS added unless the template wrote it.
   */
  render(turns: readonly Turn[], tools: readonly ToolFunction[]): string {
    const rendered = this.renderMessages(this.messages(turns, tools), tools);
    return this.prependBos && !rendered.startsWith(this.bos) ? this.bos + rendered : rendered;
  }

  private renderMessages(messages: Message[], tools: readonly ToolFunction[]): string {
    const render = (list: Message[]) =>
      this.template.render({
        messages: list,
        ...(this.syntax.native && tools.length > 0 ? { tools: tools.map(openAiTool) } : {}),
        add_generation_prompt: true,
        bos_token: this.bos,
        eos_token: this.eos,
      });
    try {
      return render(messages);
    } catch (first) {
      // Templates without a system role (Gemma's) raise on one: its text goes before the first user message's.
      const merged = withoutSystem(messages);
      try {
        if (merged !== messages) return render(merged);
      } catch {
        // The first reason is the one to give.
      }
      throw new InvalidInput(
        { part: "history" },
        `the model's chat template refuses these messages: ${first instanceof Error ? first.message : String(first)}`,
      );
    }
  }

  /** OpenAI's messages as templates take them; in Hermes' form where the template shows no tools. */
  private messages(turns: readonly Turn[], tools: readonly ToolFunction[]): Message[] {
    const { syntax } = this;
    const id = (value: string) => (syntax.name === "mistral" ? mistralId(value) : value);
    const messages: Message[] = [];
    for (const turn of turns) {
      switch (turn.role) {
        case "system":
          messages.push({ role: turn.role, content: turn.content });
          break;
        case "user": {
          // Results written as a user message: a question right after them joins it, for templates that alternate roles.
          const last = messages.at(-1);
          if (!syntax.native && last?.role === "user" && last.content.startsWith("<tool_response>")) last.content += `\n\n${turn.content}`;
          else messages.push({ role: turn.role, content: turn.content });
          break;
        }
        case "assistant": {
          const calls = turn.toolCalls ?? [];
          const thought = turn.reasoning ? { reasoning_content: turn.reasoning } : {};
          if (!syntax.native) {
            const written = calls.map((call) => `<tool_call>\n${pythonJson({ name: call.name, arguments: JSON.parse(call.arguments) })}\n</tool_call>`);
            messages.push({ role: "assistant", content: [turn.content, ...written].filter((part) => part !== "").join("\n"), ...thought });
            break;
          }
          const toolCalls = calls.map((call) => ({ id: id(call.id), type: "function", function: { name: call.name, arguments: JSON.parse(call.arguments) } }));
          messages.push({ role: "assistant", content: turn.content, ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}), ...thought });
          break;
        }
        case "tool": {
          if (syntax.native) {
            messages.push({ role: "tool", content: turn.content, tool_call_id: id(turn.toolCallId ?? ""), ...(turn.name ? { name: turn.name } : {}) });
            break;
          }
          const response = `<tool_response>\n${turn.content}\n</tool_response>`;
          const last = messages.at(-1);
          if (last?.role === "user" && last.content.startsWith("<tool_response>")) last.content += `\n${response}`;
          else messages.push({ role: "user", content: response });
          break;
        }
      }
    }
    if (syntax.native || tools.length === 0) return messages;
    const described = describeTools(tools);
    const [first] = messages;
    if (first?.role === "system") return [{ ...first, content: `${first.content}\n\n${described}` }, ...messages.slice(1)];
    return [{ role: "system", content: described }, ...messages];
  }
}

/** The system prompt's part about tools, as Qwen2.5's template writes it. */
export function describeTools(tools: readonly ToolFunction[]): string {
  return [
    "# Tools",
    "",
    "You may call one or more functions to assist with the user query.",
    "",
    "You are provided with function signatures within <tools></tools> XML tags:",
    "<tools>",
    ...tools.map((tool) => pythonJson(openAiTool(tool))),
    "</tools>",
    "",
    "For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:",
    "<tool_call>",
    '{"name": <function-name>, "arguments": <args-json-object>}',
    "</tool_call>",
  ].join("\n");
}

function openAiTool(tool: ToolFunction) {
  return {
    type: "function",
    function: { name: tool.name, ...(tool.description !== undefined ? { description: tool.description } : {}), parameters: tool.parameters },
  };
}

/** JSON as Python's `json.dumps` (the templates' `tojson`) writes it: `", "` and `": "` between items. */
export function pythonJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(pythonJson).join(", ")}]`;
  if (typeof value === "object" && value !== null) {
    return `{${Object.entries(value)
      .filter(([, item]) => item !== undefined)
      .map(([key, item]) => `${JSON.stringify(key)}: ${pythonJson(item)}`)
      .join(", ")}}`;
  }
  return JSON.stringify(value) ?? "null";
}

/** System messages' text moved to the start of the first user message. */
function withoutSystem(messages: Message[]): Message[] {
  const system = messages.filter((message) => message.role === "system");
  if (system.length === 0) return messages;
  const rest = messages.filter((message) => message.role !== "system");
  const firstUser = rest.findIndex((message) => message.role === "user");
  const prefix = system.map((message) => message.content).join("\n\n");
  if (firstUser < 0) return [{ role: "user", content: prefix }, ...rest];
  return rest.map((message, i) => (i === firstUser ? { ...message, content: `${prefix}\n\n${message.content}` } : message));
}
