import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import { Template } from "@huggingface/jinja";
import { type ChatHistoryItem, getLlama, JinjaTemplateChatWrapper, type Llama, type LlamaModel, type Token } from "node-llama-cpp";
import { FAMILIES, FAMILY_PRESETS, type FamilyPreset } from "../../src/gguf/families";
import type { ChatReply, MessagePage } from "../../src/http/contract";
import type { ChatCompletion, ChatCompletionChunk } from "../../src/http/openai/contract";
import type { Engine, GenerateResult } from "../../src/llm/engine";
import { describeTools, pythonJson } from "../../src/llm/template-chat";
import { toolSyntaxOf } from "../../src/llm/tool-syntax";
import {
  allowSlowTests,
  bearer,
  type Generation,
  observeGenerations,
  postChat,
  presetModel,
  readSse,
  type Served,
  type SseEvent,
  serveApp,
  sseEvents,
  testDb,
  testEngine,
} from "../support";

allowSlowTests();

/** Template and special-token text no reply or stored message may ever show. */
const TEMPLATE_TEXT = [
  "<think>",
  "</think>",
  "<|eot_id|>",
  "<|start_header_id|>",
  "<|im_end|>",
  "<|im_start|>",
  "<end_of_turn>",
  "<start_of_turn>",
  "[/INST]",
  "[INST]",
  "</s>",
  "<|end|>",
  "<|assistant|>",
  "<|user|>",
];
const NON_ASCII = "Héllo wörld, ça va? 👋🏽 日本語のテキスト 中文 ñandú";

let llama: Llama;
beforeAll(async () => {
  llama = await getLlama({ gpu: false, build: "never" });
});
afterAll(async () => {
  await llama.dispose();
});

for (const preset of FAMILY_PRESETS) {
  const family = FAMILIES[preset];

  describe(`the ${preset} family over HTTP`, () => {
    const db = testDb(`family-${preset}`);
    let key: string;
    let engine: Engine;
    let server: Served;
    let model: LlamaModel;
    let generations: Generation[] = [];

    beforeAll(async () => {
      key = (await db.keys.create(preset, "user")).key;
      engine = await testEngine({ preset: preset as FamilyPreset, parallel: 1, contextSize: 1024 });
      generations = observeGenerations(engine);
      server = serveApp({ storage: db.storage, engine });
      model = await llama.loadModel({ modelPath: await presetModel(preset as FamilyPreset) });
    });
    afterAll(async () => {
      await server.stop();
      await engine.close();
      await model.dispose();
      await db.storage.close();
    });

    async function chat(body: Record<string, unknown>): Promise<ChatReply> {
      const response = await postChat(server.url, key, { temperature: 0, ...body });
      expect(response.status).toBe(200);
      return (await response.json()) as ChatReply;
    }

    async function storedContents(conversationId: string): Promise<string[]> {
      const response = await fetch(`${server.url}/api/v1.0/chat/messages?conversation_id=${conversationId}&sort_by=id:asc&rows_per_page=100`, {
        headers: bearer(key),
      });
      return ((await response.json()) as MessagePage).data.map((m) => m.content);
    }

    const expectClean = (text: string) => {
      for (const special of TEMPLATE_TEXT) expect(text).not.toContain(special);
    };

    test("a plain reply reads like words and ends by itself on the family's end of turn", async () => {
      const reply = await chat({ message: "Hello there!", conversation_id: "plain" });
      expect(reply.message.finish_reason).toBe("stop");
      expect(reply.message.content).toMatch(/^[A-Z][\w', :!?.]*[.!?]$/);
      expectClean(reply.message.content);
      // A thinking family's thought comes apart from its answer, one line of words.
      if (family.thinks) expect(reply.message.reasoning).toMatch(/^[A-Z][\w', :;!?.]*[.!?]$/);
      else expect(reply.message).not.toHaveProperty("reasoning");
      expectClean(reply.message.reasoning ?? "");
      // Ended by the end-of-turn token, not by the cap: the reply is far shorter.
      expect(reply.usage.completion_tokens).toBeLessThan(60);
    });

    test("a streamed reply: deltas free of template text that make up the stored content", async () => {
      const response = await postChat(server.url, key, { message: "What can you do?", conversation_id: "streamed", stream: true, temperature: 0.8, seed: 7 });
      expect(response.status).toBe(200);
      const events: SseEvent[] = [];
      for await (const event of readSse(response)) events.push(event);
      const deltas = events.filter((e) => e.event === "delta").map((e) => (e.data as { content: string }).content);
      const done = events.at(-1)!;
      expect(done.event).toBe("done");
      const reply = done.data as ChatReply;
      expect(reply.message.finish_reason).toBe("stop");
      expect(deltas.length).toBeGreaterThan(1);
      for (const delta of deltas) expectClean(delta);
      expect(deltas.join("")).toBe(reply.message.content);
      for (const content of await storedContents("streamed")) expectClean(content);
    });

    test("Anthropic's Messages API: no template text in any block; end_turn, stop_sequence, max_tokens and tool_use where they belong", async () => {
      const client = new Anthropic({ apiKey: key, baseURL: server.url, maxRetries: 0 });
      const ask = {
        model: "any",
        max_tokens: 100,
        messages: [{ role: "user", content: "Hello there!" }],
        temperature: 0,
      } as Anthropic.MessageCreateParamsNonStreaming;
      const texts = (message: Anthropic.Message) => message.content.flatMap((block) => (block.type === "text" ? [block.text] : []));
      /** A reasoning model's thought is a block of its own, as clean as the text. */
      const expectCleanBlocks = (message: Anthropic.Message) => {
        for (const block of message.content)
          if (block.type === "text" || block.type === "thinking") expectClean(block.type === "text" ? block.text : block.thinking);
      };
      const whole = await client.messages.create(ask);
      expect(whole.stop_reason).toBe("end_turn");
      const [text] = texts(whole);
      expectCleanBlocks(whole);
      const streamed = await client.messages.stream(ask).finalMessage();
      expect(streamed).toMatchObject({ stop_reason: "end_turn", content: whole.content });
      const word = text!.split(" ")[1]!;
      const stopped = await client.messages.create({ ...ask, stop_sequences: [word] });
      expect(stopped).toMatchObject({ stop_reason: "stop_sequence", stop_sequence: word });
      expect(texts(stopped)).toEqual([text!.slice(0, text!.indexOf(word))]);
      expect((await client.messages.create({ ...ask, max_tokens: 2 })).stop_reason).toBe("max_tokens");
      // A bounded city: these models' random weights would write one without end.
      const tool = {
        name: "get_weather",
        input_schema: { type: "object" as const, properties: { city: { type: "string", maxLength: 16 } }, required: ["city"] },
      };
      const called = await client.messages.create({
        ...ask,
        max_tokens: 900,
        tools: [tool],
        tool_choice: { type: "tool", name: "get_weather", disable_parallel_tool_use: true },
      });
      expect(called.stop_reason).toBe("tool_use");
      expect(called.content.find((block) => block.type === "tool_use")).toMatchObject({ name: "get_weather", input: { city: expect.any(String) } });
      expectCleanBlocks(called);
    });

    test("non-ASCII input round-trips into storage and, exactly, into the prompt", async () => {
      const reply = await chat({ message: NON_ASCII, conversation_id: "unicode" });
      expect(reply.user_message.content).toBe(NON_ASCII);
      expect((await storedContents("unicode"))[0]).toBe(NON_ASCII);
      expect(generations.at(-1)!.result.prompt).toContain(NON_ASCII);
      expect(model.detokenize(model.tokenize(NON_ASCII))).toBe(NON_ASCII);
    });

    test("an OpenAI stop string spanning several tokens cuts the reply exactly before it, streamed and not, and is never streamed", async () => {
      const completion = (body: Record<string, unknown>) =>
        fetch(`${server.url}/v1/chat/completions`, {
          method: "POST",
          headers: { ...bearer(key), "content-type": "application/json" },
          body: JSON.stringify({ model: "any", temperature: 0, messages: [{ role: "user", content: "Hello there!" }], ...body }),
        });
      const whole = ((await (await completion({})).json()) as ChatCompletion).choices[0]!.message;
      const content = whole.content!;
      const words = content.split(" ");
      expect(words.length).toBeGreaterThanOrEqual(4);
      expect(words[1]!.length).toBeGreaterThanOrEqual(2);
      // Each word is a token of its own, with its space in front: from inside the second word to
      // inside the fourth ("m happy t" of "I am happy to help you.") is part of three tokens.
      const stop = content.slice(words[0]!.length + 2, words.slice(0, 3).join(" ").length + 2);
      const expected = content.slice(0, content.indexOf(stop));

      const cut = ((await (await completion({ stop: [stop] })).json()) as ChatCompletion).choices[0]!;
      expect(cut.finish_reason).toBe("stop");
      expect(cut.message).toEqual({ ...whole, content: expected });

      const response = await completion({ stop: stop, stream: true });
      const chunks: ChatCompletionChunk[] = [];
      for await (const { event, data } of sseEvents(response))
        if (event === "message" && data !== "[DONE]") chunks.push(JSON.parse(data) as ChatCompletionChunk);
      const pieces = chunks.flatMap((chunk) => chunk.choices[0]?.delta.content || []);
      // Concatenated, the deltas are the cut reply: nothing of the stop string was sent and then taken back.
      expect(pieces.join("")).toBe(expected);
      expect(pieces.length).toBeGreaterThan(1);
      expect(chunks.at(-1)!.choices[0]!.finish_reason).toBe("stop");
      const thought = chunks.flatMap((chunk) => chunk.choices[0]?.delta.reasoning_content ?? []).join("");
      expect(thought).toBe(whole.reasoning_content ?? "");
    });

    test("turn 3's prompt is the template's rendering, token for token, and all the sequence holds of it is reused", async () => {
      const turns = ["Hi, who are you?", "Tell me something nice.", "Thank you!"];
      const replies: ChatReply[] = [];
      for (const message of turns) replies.push(await chat({ message, conversation_id: "three-turns" }));
      const [second, third] = generations.slice(-2).map((g) => g.result) as [GenerateResult, GenerateResult];

      const template = model.fileInfo.metadata.tokenizer.chat_template!;
      let reference: Token[];
      if (family.thinks) {
        // Each thought given to the template as it takes one (reasoning_content); it drops those before the last question.
        const messages = turns.flatMap((content, i) => {
          const reply = replies[i]!.message;
          const user = { role: "user", content };
          return i < turns.length - 1 ? [user, { role: "assistant", content: reply.content, reasoning_content: reply.reasoning }] : [user];
        });
        // As llama-server tokenizes it: the rendered text whole, special tokens parsed.
        reference = model.tokenize(new Template(template).render({ messages, add_generation_prompt: true }), true);
        for (const reply of replies.slice(0, -1)) expect(third.prompt).not.toContain(reply.message.reasoning!);
      } else {
        const history: ChatHistoryItem[] = [];
        for (const [i, message] of turns.entries()) {
          history.push({ type: "user", text: message });
          if (i < turns.length - 1) history.push({ type: "model", response: [replies[i]!.message.content] });
        }
        reference = new JinjaTemplateChatWrapper({ template, tokenizer: model.tokenizer })
          .generateContextState({ chatHistory: [...history, { type: "model", response: [] }] })
          .contextText.tokenize(model.tokenizer);
      }
      expect(third.promptTokens).toBe(reference.length);
      expect(third.prompt).toBe(model.detokenize(reference, true));

      // The sequence holds turn 2's prompt and reply. Everything the template renders again of it is
      // reused: the whole reply, unless the template drops its thought from the history, where the
      // reuse ends at the thought, i.e. after turn 2's prompt (llama-server's prompt cache does the
      // same: the thought's tokens are not in the new prompt, so its common prefix ends there).
      expect(third.prompt.startsWith(second.prompt)).toBe(true);
      const usage = replies[1]!.usage;
      expect(replies[2]!.usage.cached_tokens).toBe(family.thinks ? usage.prompt_tokens : usage.prompt_tokens + usage.completion_tokens);
    });

    test("with tools: the prompt is the template's rendering of the calls, results and tools; a forced call comes back as tool_calls, no markup in content", async () => {
      const parameters = { type: "object", properties: { city: { type: "string", maxLength: 16 } }, required: ["city"] };
      const tool = { type: "function", function: { name: "get_weather", description: "The weather in a city", parameters } };
      // Nine letters and digits: an id Mistral's template takes as it is.
      const call = { id: "abcDEF123", type: "function", function: { name: "get_weather", arguments: '{"city": "Paris"}' } };
      const messages = [
        { role: "user", content: "What is the weather in Paris?" },
        { role: "assistant", content: "", tool_calls: [call] },
        { role: "tool", tool_call_id: call.id, content: '{"temp": 20}' },
        { role: "assistant", content: "It is warm." },
        { role: "user", content: "And in Rome?" },
      ];
      const response = await fetch(`${server.url}/v1/chat/completions`, {
        method: "POST",
        headers: { ...bearer(key), "content-type": "application/json" },
        body: JSON.stringify({
          model: "any",
          temperature: 0,
          messages,
          tools: [tool],
          tool_choice: { type: "function", function: { name: "get_weather" } },
          parallel_tool_calls: false,
        }),
      });
      const body = await response.text();
      expect({ status: response.status, body }).toEqual({ status: 200, body });
      const { message, finish_reason } = (JSON.parse(body) as ChatCompletion).choices[0]!;
      expect(finish_reason).toBe("tool_calls");
      expect(message.content).toBeNull();
      expect(message.tool_calls).toHaveLength(1);
      const [made] = message.tool_calls!;
      expect(made!.function.name).toBe("get_weather");
      expect(Object.keys(JSON.parse(made!.function.arguments) as object)).toEqual(["city"]);
      expectClean(message.reasoning_content ?? "");

      // The template given OpenAI's messages and tools, as llama-server's --jinja gives them; a
      // template that shows no tools gets them described in the system prompt, calls and results
      // written in Hermes' form (docs/API.md).
      const template = model.fileInfo.metadata.tokenizer.chat_template!;
      const native = toolSyntaxOf(template).native;
      const args = { city: "Paris" };
      const shown = native
        ? [
            messages[0],
            { role: "assistant", content: "", tool_calls: [{ ...call, function: { name: "get_weather", arguments: args } }] },
            { role: "tool", tool_call_id: call.id, name: "get_weather", content: '{"temp": 20}' },
            ...messages.slice(3),
          ]
        : [
            { role: "system", content: describeTools([{ name: "get_weather", description: "The weather in a city", parameters }]) },
            messages[0],
            { role: "assistant", content: `<tool_call>\n${pythonJson({ name: "get_weather", arguments: args })}\n</tool_call>` },
            { role: "user", content: '<tool_response>\n{"temp": 20}\n</tool_response>' },
            ...messages.slice(3),
          ];
      const bos = model.tokens.bosString ?? "";
      const render = (list: unknown[]) =>
        new Template(template).render({
          messages: list,
          ...(native ? { tools: [tool] } : {}),
          add_generation_prompt: true,
          bos_token: bos,
          eos_token: model.tokens.eosString ?? "",
        });
      let text: string;
      try {
        text = render(shown);
      } catch {
        // Gemma's template has no system role: the description opens the first user message.
        const [system, user, ...rest] = shown as { content: string }[];
        text = render([{ ...user, content: `${system!.content}\n\n${user!.content}` }, ...rest]);
      }
      if (model.tokens.shouldPrependBosToken && bos !== "" && !text.startsWith(bos)) text = bos + text;
      const reference = model.tokenize(text, true);
      const generated = generations.at(-1)!.result;
      expect(generated.promptTokens).toBe(reference.length);
      expect(generated.prompt).toBe(model.detokenize(reference, true));
    });
  });
}
