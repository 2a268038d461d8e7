import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { type Browser, type BrowserContext, chromium, type Page } from "playwright-core";
import type { OpenAiModel } from "../../src/http/openai/contract";
import type { Engine } from "../../src/llm/engine";
import { allowSlowTests, bearer, compiledNatives, presetModel, type Served, serveApp, serveModels, type TestDb, testDb, testEngine, until } from "../support";
import { VISION_IMAGES, VISION_PROMPT, visionPair } from "../support/vision";

allowSlowTests();

// Debian's Chromium: browser downloads do not work here. `.ci/run` installs it when missing.
const CHROMIUM = "/usr/bin/chromium";
const ARTIFACTS = join(import.meta.dir, "../../test-artifacts");
const skipped = process.env.PARLEY_SKIP_BROWSER === "1";
const installed = existsSync(CHROMIUM);

if (!installed && !skipped) {
  test("headless Chromium is installed", () => {
    throw new Error(`${CHROMIUM} is missing: apt-get install -y chromium (as .ci/run does), or set PARLEY_SKIP_BROWSER=1 to skip the browser tests`);
  });
}

interface Stored {
  id: number;
  role: string;
  content: string;
  reasoning?: string;
  finish_reason?: string;
  model?: string;
}

describe.skipIf(skipped || !installed)("the web page at /", () => {
  let db: TestDb;
  let engine: Engine;
  let served: Served;
  /** A real reasoning model behind the same storage: qwen3-thinking, in Qwen3's own format. */
  let thinking: { engine: Engine; served: Served } | undefined;
  let browser: Browser;
  let alice: { key: string; userId: number };
  let context: BrowserContext | undefined;
  /** Uncaught exceptions and CSP violations in the page: any of them fails the test. */
  let pageErrors: string[] = [];

  beforeAll(async () => {
    db = testDb("web");
    alice = await db.keys.create("alice", "user");
    // bench-small never ends a reply by itself and emits a token every 20–40 ms: each one is
    // visible in the page, and a Stop always lands mid-reply. Replies are capped by max tokens.
    engine = await testEngine({ preset: "bench-small", parallel: 2, contextSize: 512 });
    served = serveApp({ storage: db.storage, engine });
    const thinkingEngine = await testEngine({ preset: "qwen3-thinking", parallel: 1, contextSize: 1024 });
    thinking = { engine: thinkingEngine, served: serveApp({ storage: db.storage, engine: thinkingEngine }) };
    // `launch` gives the browser a fresh temporary profile (its --user-data-dir) and removes it on close.
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-quic",
      ],
    });
  });

  afterAll(async () => {
    await browser?.close();
    await served?.stop();
    await engine?.close();
    await thinking?.served.stop();
    await thinking?.engine.close();
    db?.storage.close();
  });

  afterEach(async () => {
    await context?.close();
    context = undefined;
    const errors = pageErrors;
    pageErrors = [];
    expect(errors).toEqual([]);
  });

  async function open(options: { width?: number; height?: number; colorScheme?: "light" | "dark"; server?: Served } = {}): Promise<Page> {
    context = await browser.newContext({
      viewport: { width: options.width ?? 1280, height: options.height ?? 800 },
      colorScheme: options.colorScheme ?? "light",
    });
    const page = await context.newPage();
    page.on("pageerror", (error) => pageErrors.push(error.message));
    page.on("console", (message) => {
      if (message.type() === "error" && !message.text().startsWith("Failed to load resource")) pageErrors.push(message.text());
    });
    await page.goto(`${(options.server ?? served).url}/`);
    return page;
  }

  /** Types the key and the conversation id as a user would; Tab commits each field. */
  /** Stored messages of the conversation as the native API returns them (an answer with its thought), for a reply the test plays. */
  const storedMessage = (conversationId: string, reasoning?: string) => (id: number, role: "user" | "assistant", content: string) => ({
    id,
    role,
    content,
    created_at: new Date().toISOString(),
    conversation_id: conversationId,
    user_id: alice.userId,
    ...(role === "assistant" ? { finish_reason: "stop", ...(reasoning !== undefined ? { reasoning } : {}) } : {}),
  });

  async function signIn(page: Page, conversationId: string, key = alice.key): Promise<void> {
    await page.fill("#key", key);
    await page.press("#key", "Tab");
    await page.fill("#conversation", conversationId);
    await page.press("#conversation", "Tab");
  }

  async function send(page: Page, text: string): Promise<void> {
    await page.fill("#message", text);
    await page.press("#message", "Enter");
  }

  async function stored(conversationId: string): Promise<Stored[]> {
    const response = await fetch(`${served.url}/api/v1.0/chat/messages?conversation_id=${conversationId}&sort_by=created_at:desc&rows_per_page=100`, {
      headers: bearer(alice.key),
    });
    return ((await response.json()) as { data: Stored[] }).data;
  }

  const texts = (page: Page, selector: string) => page.locator(selector).allTextContents();

  /**
   * The reply's text as it arrived. A reply is shown rendered from Markdown, which does not keep
   * its text verbatim (marks, spacing); the page keeps the text itself in the body's `data-source`.
   */
  const replySource = (page: Page) => page.locator("#log .assistant .body").getAttribute("data-source");

  /** Records the reply's text after every DOM change, to see it grow rather than appear at once. */
  const watchReply = (page: Page) =>
    page.evaluate(`
      window.replyStates = [];
      new MutationObserver(() => {
        const reply = document.querySelector("#log .assistant .body");
        if (reply) window.replyStates.push(reply.dataset.source ?? "");
      }).observe(document.getElementById("log"), { subtree: true, childList: true, characterData: true, attributes: true });
    `);

  test("Enter sends; the reply streams in token by token and is the stored message", async () => {
    const page = await open();
    await signIn(page, "stream-1");
    await page.fill("#max-tokens", "16");
    await watchReply(page);
    await send(page, "Hello there");

    const reply = page.locator("#log .assistant[data-id]");
    await reply.waitFor();
    const final = await replySource(page);
    const states = (await page.evaluate("window.replyStates")) as string[];
    const intermediate = [...new Set(states)].filter((state) => state !== "" && state !== final);
    expect(intermediate.length).toBeGreaterThanOrEqual(2);
    for (const state of intermediate) expect(final!.startsWith(state)).toBe(true);

    const [storedReply, storedQuestion] = await stored("stream-1");
    expect(storedReply).toMatchObject({ role: "assistant", content: final!, finish_reason: "length" });
    expect(await reply.getAttribute("data-id")).toBe(String(storedReply!.id));
    expect(storedQuestion).toMatchObject({ role: "user", content: "Hello there" });
    expect(await page.locator("#log .user").getAttribute("data-id")).toBe(String(storedQuestion!.id));
    // Ready for the next message without touching the mouse.
    expect(await page.inputValue("#message")).toBe("");
    expect(await page.evaluate("document.activeElement.id")).toBe("message");
  });

  test("Stop ends the stream; the partial reply stays shown and is stored as cancelled", async () => {
    const page = await open();
    await signIn(page, "stop-1");
    await send(page, "Tell me everything");
    // Polled from the test side: the page's CSP (rightly) refuses the `eval` that `waitForFunction` needs.
    await until(async () => ((await page.locator("#log .assistant .body").textContent()) ?? "").length > 8, "the reply to have a few tokens");
    // Screen readers hear the reply once, when it is complete, not token by token.
    expect(await page.getAttribute("#log", "aria-live")).toBe("polite");
    expect(await page.getAttribute("#log .assistant", "aria-busy")).toBe("true");
    // By keyboard: from the message box, past Send, to Stop.
    await page.keyboard.press("Tab");
    await page.keyboard.press("Tab");
    expect(await page.evaluate("document.activeElement.id")).toBe("stop");
    await page.keyboard.press("Enter");

    await page.locator('#log .assistant[data-finish="cancelled"]').waitFor();
    const shown = (await replySource(page))!;
    expect(await page.locator("#log .assistant .note").textContent()).toBe("(stopped)");
    expect(await page.getAttribute("#send", "aria-disabled")).toBeNull();
    expect(await page.isDisabled("#stop")).toBe(true);
    expect(await page.getAttribute("#log .assistant", "aria-busy")).toBeNull();
    expect(await page.evaluate("document.activeElement.id")).toBe("message");

    // The server notices the closed connection within a few tokens, then stores what it generated.
    let reply: Stored | undefined;
    await until(async () => (reply = (await stored("stop-1")).find((message) => message.role === "assistant")) !== undefined, "the reply to be stored");
    expect(reply?.finish_reason).toBe("cancelled");
    expect(shown.length).toBeGreaterThan(8);
    expect(reply!.content.startsWith(shown)).toBe(true);
  });

  test("a wrong key shows the API's 401 message inline, and the unsent text is kept", async () => {
    const page = await open();
    await signIn(page, "nope", "pk_not_a_real_key_0000000000");
    const error = page.locator("#error");
    await error.waitFor();
    expect(await error.textContent()).toContain("the API key is unknown or revoked (401 unauthorized)");

    await send(page, "Anyone there?");
    await until(async () => (await page.inputValue("#message")) === "Anyone there?", "the refused text to be back");
    expect(await error.textContent()).toContain("the API key is unknown or revoked (401 unauthorized)");
    expect(await page.locator("#log li").count()).toBe(0);
  });

  test("under a token quota the page shows the tokens left today, less each reply's; without one, nothing", async () => {
    const quinn = await db.keys.create("quinn", "user");
    await db.storage.quotas.set(quinn.userId, { tokens: 100_000, period: "day" });
    const page = await open();
    await signIn(page, "quota-1", quinn.key);
    const quota = page.locator("#quota");
    await until(async () => (await quota.textContent()) === "100,000 tokens left today", "the budget to show");
    await page.fill("#max-tokens", "8");
    await send(page, "Count me");
    await page.locator("#log .assistant[data-id]").waitFor();
    const { quota: after } = (await (await fetch(`${served.url}/api/v1.0/usage`, { headers: bearer(quinn.key) })).json()) as { quota: { remaining: number } };
    expect(after.remaining).toBeLessThan(100_000);
    await until(async () => (await quota.textContent()) === `${after.remaining.toLocaleString("en-US")} tokens left today`, "the budget to drop by the reply");
    expect(await quota.isVisible()).toBe(true);

    await signIn(page, "quota-1", alice.key);
    await until(async () => await quota.isHidden(), "no budget shown for a user without a quota");
  });

  test("with several models a picker lists the chat models, the default first; the reply comes from the model picked, which the conversation keeps when reopened", async () => {
    const paths = [await presetModel("bench-small"), await presetModel("demo"), await presetModel("embed"), await presetModel("rerank")];
    const both = await serveModels({ storage: db.storage, paths, max: 2, keepAliveMs: -1 });
    try {
      const page = await open({ server: both.served });
      await signIn(page, "picked-1");
      await until(async () => await page.locator("#model-field").isVisible(), "the model picker to show");
      expect(await texts(page, "#model option")).toEqual(["parley-bench-small (default)", "parley-demo"]);
      await page.selectOption("#model", "parley-demo");
      await page.fill("#max-tokens", "6");
      await send(page, "Hello");
      await page.locator("#log .assistant[data-id]").waitFor();
      const [reply] = await stored("picked-1");
      expect(reply).toMatchObject({ role: "assistant", model: "parley-demo" });

      // Reopened, after a reload or from the sidebar, it goes on with the model of its newest reply.
      const picked = (why: string) => until(async () => (await page.inputValue("#model")) === "parley-demo", why);
      await page.selectOption("#model", "parley-bench-small");
      await page.reload();
      await picked("the conversation's model to be picked after a reload");
      await page.click("#new-conversation");
      await page.selectOption("#model", "parley-bench-small");
      await page.click('#conversation-list li[data-id="picked-1"] .open');
      await picked("the conversation's model to be picked when it is opened again");
    } finally {
      await both.stop();
    }
  });

  test("with one model there is no picker", async () => {
    const page = await open();
    await signIn(page, "one-model");
    await until(async () => (await page.locator("#model option").count()) === 1, "the models to be listed");
    expect(await page.locator("#model-field").isHidden()).toBe(true);
  });

  test("a picture conversation reopens on the model that saw it, which offers Attach a picture; a model that cannot see offers none", async () => {
    const listed = (id: string, vision: boolean, purpose: OpenAiModel["purpose"]): OpenAiModel => ({
      id,
      object: "model",
      created: 0,
      owned_by: "parley",
      loaded: true,
      vision,
      purpose,
    });
    const conversation = await db.storage.conversations.findOrCreate(alice.userId, "seen-1");
    const picture = Buffer.from(VISION_IMAGES.stripes!()).toString("base64");
    await db.storage.conversations.addMessage(conversation, { role: "user", content: "What is this?", images: [{ at: 13, base64: picture }] });
    await db.storage.conversations.addMessage(conversation, { role: "assistant", content: "Stripes.", finishReason: "stop", model: "seeing" });
    const page = await open();
    // A listing of what this test needs: a model that sees among others, whatever the natives here can do.
    const data = [listed("plain", false, "chat"), listed("vectors", false, "embedding"), listed("seeing", true, "chat")];
    await page.route("**/v1/models", (route) => route.fulfill({ json: { object: "list", data } }));
    await signIn(page, "seen-1");
    await until(async () => (await page.inputValue("#model")) === "seeing", "the conversation's model to be picked");
    expect(await texts(page, "#model option")).toEqual(["plain (default)", "seeing"]);
    await page.locator("#attach-field").waitFor();
    expect(await page.getAttribute("#log .user .pictures img", "src")).toBe(`data:image/png;base64,${picture}`);
    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: join(ARTIFACTS, "web-picture-conversation.png") });

    await page.selectOption("#model", "plain");
    expect(await page.locator("#attach-field").isHidden()).toBe(true);
  });

  test("a reply that fails once its message is stored says why in its place, never as an empty bubble", async () => {
    const page = await open();
    await signIn(page, "failing-1");
    const question = {
      id: 900_021,
      role: "user",
      content: "Fail me",
      created_at: new Date().toISOString(),
      conversation_id: "failing-1",
      user_id: alice.userId,
    };
    const body = [
      sse("start", { conversation_id: "failing-1", new_conversation: true, user_message: question, model: "test" }),
      sse("error", { error: { code: "internal", message: "the engine fell over", request_id: "req-1" } }),
    ].join("");
    await page.route("**/api/v1.0/chat", (route) => route.fulfill({ status: 200, contentType: "text/event-stream", body }));
    await send(page, "Fail me");
    const reply = page.locator("#log .assistant.failed");
    await reply.waitFor();
    expect(await reply.locator(".failure").textContent()).toBe("the engine fell over (internal). Request id: req-1.");
    expect(await reply.getAttribute("aria-busy")).toBeNull();
    expect(await page.getAttribute("#log .user", "data-id")).toBe("900021");
    expect(await page.locator("#error").isHidden()).toBe(true);
    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: join(ARTIFACTS, "web-failed-reply.png") });
  });

  test("temperature and max tokens out of range cannot be sent", async () => {
    const page = await open();
    await signIn(page, "bounds-1");
    const chatRequests: string[] = [];
    page.on("request", (request) => {
      if (request.url().endsWith("/api/v1.0/chat")) chatRequests.push(request.postData() ?? "");
    });

    // The slider clamps whatever it is given, by script or by keyboard.
    await page.evaluate(`document.getElementById("temperature").value = "1.7"`);
    expect(await page.inputValue("#temperature")).toBe("1");
    await page.evaluate(`document.getElementById("temperature").value = "-3"`);
    expect(await page.inputValue("#temperature")).toBe("0");
    await page.focus("#temperature");
    await page.keyboard.press("End");
    await page.keyboard.press("ArrowRight");
    expect(await page.inputValue("#temperature")).toBe("1");
    expect(await page.textContent("#temperature-value")).toBe("1");

    await page.fill("#max-tokens", "5000");
    await send(page, "Too long a reply");
    expect(await page.evaluate(`document.getElementById("max-tokens").validity.rangeOverflow`)).toBe(true);
    expect(await page.inputValue("#message")).toBe("Too long a reply");

    await page.fill("#max-tokens", "3");
    await send(page, "Short, please");
    await page.locator("#log .assistant[data-id]").waitFor();
    expect(chatRequests.map((body) => JSON.parse(body))).toEqual([
      { message: "Short, please", conversation_id: "bounds-1", temperature: 1, max_tokens: 3, stream: true },
    ]);
  });

  test("after a reload the key is still there (not in the URL) and so is the history", async () => {
    const page = await open();
    await signIn(page, "reload-1");
    await page.fill("#max-tokens", "4");
    await send(page, "Remember me");
    await page.locator("#log .assistant[data-id]").waitFor();
    const before = await texts(page, "#log li");

    await page.reload();
    await page.locator("#log .assistant[data-id]").waitFor();
    expect(await texts(page, "#log li")).toEqual(before);
    expect(await page.inputValue("#key")).toBe(alice.key);
    expect(await page.inputValue("#conversation")).toBe("reload-1");
    expect(page.url()).toBe(`${served.url}/`);
  });

  test("with a model that sees pictures, one is attached, sent with the message, stored and shown again after a reload; a model without offers none", async () => {
    const plain = await open();
    await signIn(plain, "no-pictures");
    await until(async () => (await plain.locator("#model option").count()) === 1, "the models to be listed");
    expect(await plain.locator("#attach-field").isHidden()).toBe(true);
    await context?.close();
    if ((await compiledNatives()) === undefined) return;

    const { model, projector } = await visionPair();
    const seeing = await testEngine({ modelPath: model, projectorPath: projector, parallel: 1, contextSize: 1024 });
    const vision = serveApp({ storage: db.storage, engine: seeing });
    try {
      const page = await open({ server: vision });
      await signIn(page, "pictures-1");
      await page.locator("#attach-field").waitFor();
      const picture = VISION_IMAGES.stripes!();
      const url = `data:image/png;base64,${Buffer.from(picture).toString("base64")}`;
      await page.setInputFiles("#picture", { name: "stripes.png", mimeType: "image/png", buffer: Buffer.from(picture) });
      await until(async () => (await page.getAttribute("#attached", "src")) === url, "the attached picture to show");
      await page.fill("#max-tokens", "4");
      await send(page, VISION_PROMPT);
      await page.locator("#log .assistant[data-id]").waitFor();
      expect(await page.locator("#attached").isHidden()).toBe(true);
      expect(await page.getAttribute("#log .user .pictures img", "src")).toBe(url);
      const response = await fetch(`${vision.url}/api/v1.0/chat/messages?conversation_id=pictures-1&sort_by=id:asc`, { headers: bearer(alice.key) });
      const [asked] = ((await response.json()) as { data: { images?: string[] }[] }).data;
      expect(asked!.images).toEqual([url]);

      await page.reload();
      await page.locator("#log .assistant[data-id]").waitFor();
      expect(await page.getAttribute("#log .user .pictures img", "src")).toBe(url);
    } finally {
      await vision.stop();
      await seeing.close();
    }
  });

  test('"Load older" pages back through 45 stored messages, oldest first', async () => {
    const conversation = await db.storage.conversations.findOrCreate(alice.userId, "long-1");
    const start = Date.parse("2026-01-01T00:00:00Z");
    for (let i = 1; i <= 45; i++) {
      const role = i % 2 === 1 ? "user" : "assistant";
      await db.storage.conversations.addMessage(conversation, {
        role,
        content: `message ${i}`,
        createdAt: start + i * 1000,
        ...(role === "assistant" ? { finishReason: "stop" } : {}),
      });
    }
    const page = await open({ height: 600 });
    await signIn(page, "long-1");
    const button = page.locator("#load-older");
    await button.waitFor();
    expect(await texts(page, "#log .body")).toEqual(range(26, 45));

    await button.focus();
    await page.keyboard.press("Enter");
    await page.locator("#log li").nth(39).waitFor();
    expect(await texts(page, "#log .body")).toEqual(range(6, 45));

    await page.keyboard.press("Enter");
    await button.waitFor({ state: "hidden" });
    expect(await texts(page, "#log .body")).toEqual(range(1, 45));
    expect(await page.evaluate("document.activeElement.id")).toBe("log");
  });

  test("fits 360 px and 1280 px wide, light and dark (screenshots in test-artifacts/)", async () => {
    const conversation = await db.storage.conversations.findOrCreate(alice.userId, "screenshot");
    const turns = [
      "What can I do with Parley?",
      "Parley answers chat messages from a model that runs on this machine, and keeps every conversation.",
      "Does it need the internet?",
      "No: the model, the database and this page are all served by Parley itself.",
    ];
    for (const [i, content] of turns.entries()) await db.storage.conversations.addMessage(conversation, { role: i % 2 ? "assistant" : "user", content });
    mkdirSync(ARTIFACTS, { recursive: true });

    for (const [width, height, colorScheme] of [
      [360, 740, "light"],
      [1280, 800, "light"],
      [1280, 800, "dark"],
    ] as const) {
      const page = await open({ width, height, colorScheme });
      await signIn(page, "screenshot");
      await page.locator("#log li").nth(3).waitFor();
      await page.fill("#message", "And in the dark?");
      expect(await page.evaluate("document.documentElement.scrollWidth")).toBeLessThanOrEqual(width);
      await page.screenshot({ path: join(ARTIFACTS, `web-${width}-${colorScheme}.png`) });
      await context!.close();
    }
  });

  /** How the model picker is laid out and drawn beside the max-tokens input (`#model-field` shown). */
  interface PickerLayout {
    select: { left: number; right: number; top: number; bottom: number; width: number; height: number };
    maxTokens: { top: number; bottom: number; height: number };
    /** The width the select takes when nothing constrains it: its longest option shown whole. */
    naturalWidth: number;
    /** The longest option's text, measured in the select's own font. */
    longestTextWidth: number;
    /** The select's content box: what is left for the text once padding is taken off. */
    contentWidth: number;
    pageWidth: number;
    viewportWidth: number;
    style: { select: Record<string, string>; maxTokens: Record<string, string> };
  }

  // Not line-height: Chromium keeps a select's "normal" whatever the page sets; the heights are compared instead.
  const SHARED_STYLE = [
    "font-family",
    "font-size",
    "font-weight",
    "color",
    "background-color",
    "border-top-width",
    "border-top-style",
    "border-top-color",
    "border-top-left-radius",
    "padding-top",
    "padding-left",
  ];

  // A string, as elsewhere here: the tests are compiled without the DOM's types.
  const pickerLayout = (page: Page) =>
    page.evaluate(`(() => {
      const properties = ${JSON.stringify(SHARED_STYLE)};
      const select = document.getElementById("model");
      const maxTokens = document.getElementById("max-tokens");
      const box = (element) => element.getBoundingClientRect().toJSON();
      const styleOf = (element) => {
        const style = getComputedStyle(element);
        return Object.fromEntries(properties.map((property) => [property, style.getPropertyValue(property)]));
      };
      // A copy free to size itself, beside the real one so it inherits the same font.
      const copy = select.cloneNode(true);
      Object.assign(copy.style, { position: "absolute", visibility: "hidden", width: "auto", minWidth: "0", maxWidth: "none" });
      select.after(copy);
      const naturalWidth = copy.getBoundingClientRect().width;
      copy.remove();
      const style = getComputedStyle(select);
      const context = document.createElement("canvas").getContext("2d");
      context.font = style.font;
      const longestTextWidth = Math.max(...[...select.options].map((option) => context.measureText(option.text).width));
      return {
        select: box(select),
        maxTokens: box(maxTokens),
        naturalWidth,
        longestTextWidth,
        contentWidth: select.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight),
        pageWidth: document.documentElement.scrollWidth,
        viewportWidth: window.innerWidth,
        style: { select: styleOf(select), maxTokens: styleOf(maxTokens) },
      };
    })()`) as Promise<PickerLayout>;

  test("with several models the picker is styled like the other inputs, shows its options whole and fits 1280, 390 and 360 px", async () => {
    const both = await serveModels({ storage: db.storage, paths: [await presetModel("demo"), await presetModel("bench-small")], max: 2, keepAliveMs: -1 });
    mkdirSync(ARTIFACTS, { recursive: true });
    try {
      for (const [width, height, colorScheme, name] of [
        [1280, 800, "light", "web-models-1280"],
        [1280, 800, "dark", "web-models-1280-dark"],
        [390, 844, "light", "web-models-390"],
        [360, 740, "light", "web-models-360"],
      ] as const) {
        const page = await open({ width, height, colorScheme, server: both.served });
        await signIn(page, "models-layout");
        await until(async () => await page.locator("#model-field").isVisible(), "the model picker to show");
        expect(await texts(page, "#model option")).toEqual(["parley-demo (default)", "parley-bench-small"]);
        const layout = await pickerLayout(page);
        const where = `${name}: ${JSON.stringify(layout)}`;

        // Every option's text whole: as wide as the select would make itself, the text inside its padding.
        expect(layout.select.width, where).toBeGreaterThanOrEqual(layout.naturalWidth - 0.5);
        expect(layout.contentWidth, where).toBeGreaterThanOrEqual(layout.longestTextWidth);
        expect(layout.style.select, where).toEqual(layout.style.maxTokens);
        expect(Math.abs(layout.select.height - layout.maxTokens.height), where).toBeLessThanOrEqual(1);
        expect(layout.pageWidth, where).toBeLessThanOrEqual(layout.viewportWidth);
        expect(layout.select.right, where).toBeLessThanOrEqual(width);
        if (width === 1280) {
          // On one row: their vertical extents overlap.
          expect(layout.select.top < layout.maxTokens.bottom && layout.maxTokens.top < layout.select.bottom, where).toBe(true);
        }
        await page.screenshot({ path: join(ARTIFACTS, `${name}.png`) });
        await context!.close();
      }
    } finally {
      await both.stop();
    }
  });

  /** Stores a conversation directly, its messages a minute apart from `start`. */
  async function storeConversation(conversationId: string, start: number, contents: string[]): Promise<void> {
    const conversation = await db.storage.conversations.findOrCreate(alice.userId, conversationId);
    for (const [i, content] of contents.entries()) {
      const role = i % 2 ? "assistant" : "user";
      await db.storage.conversations.addMessage(conversation, {
        role,
        content,
        createdAt: start + i * 60_000,
        ...(role === "assistant" ? { finishReason: "stop" } : {}),
      });
    }
  }

  test("the sidebar lists the conversations newest first, opens one, and deletes one after asking", async () => {
    const other = await db.keys.create("olga", "user");
    const day = Date.parse("2030-01-01T00:00:00Z"); // after every conversation the other tests store
    await storeConversation("side-old", day, ["First of all", "Sure."]);
    await storeConversation("side-new", day + 3_600_000, ["The newest one", "Indeed."]);
    await storeConversation("side-mid", day + 1_800_000, ["Somewhere in between", "Yes."]);
    const theirs = await db.storage.conversations.findOrCreate(other.userId, "side-theirs");
    await db.storage.conversations.addMessage(theirs, { role: "user", content: "Not alice's", createdAt: day + 7_200_000 });

    const page = await open();
    await signIn(page, "side-mid");
    await page.locator("#conversation-list li").nth(2).waitFor();
    expect((await texts(page, "#conversation-list .title")).slice(0, 3)).toEqual(["The newest one", "Somewhere in between", "First of all"]);
    expect(await texts(page, "#conversation-list .title")).not.toContain("Not alice's");
    expect(await page.getAttribute('#conversation-list li[data-id="side-mid"] .open', "aria-current")).toBe("true");
    await page.locator("#log li").nth(1).waitFor();
    expect(await texts(page, "#log .body")).toEqual(["Somewhere in between", "Yes."]);

    // Opening another conversation shows its messages, and only those.
    await page.click('#conversation-list li[data-id="side-old"] .open');
    await until(async () => (await texts(page, "#log .body")).join("|") === "First of all|Sure.", "the old conversation to be shown");
    expect(await page.inputValue("#conversation")).toBe("side-old");
    expect(await page.getAttribute('#conversation-list li[data-id="side-old"] .open', "aria-current")).toBe("true");
    expect(await page.getAttribute('#conversation-list li[data-id="side-mid"] .open', "aria-current")).toBeNull();

    // Deleting asks first: dismissed, nothing happens.
    const dialogs: string[] = [];
    page.once("dialog", (dialog) => (dialogs.push(dialog.message()), void dialog.dismiss()));
    await page.click('#conversation-list li[data-id="side-old"] .delete');
    await until(() => dialogs.length === 1, "the confirmation");
    expect(dialogs[0]).toContain("First of all");
    expect((await stored("side-old")).length).toBe(2);

    // Confirmed: the open conversation is gone from the list and the server, and a new one is open.
    page.once("dialog", (dialog) => void dialog.accept());
    await page.click('#conversation-list li[data-id="side-old"] .delete');
    await page.locator('#conversation-list li[data-id="side-old"]').waitFor({ state: "detached" });
    expect(await stored("side-old")).toEqual([]);
    expect(await page.inputValue("#conversation")).not.toBe("side-old");
    expect(await page.locator("#log li").count()).toBe(0);
    expect(await texts(page, "#conversation-list .title")).toContain("The newest one");
  });

  test("a conversation made through /v1/conversations and /v1/responses is listed and opened like any other", async () => {
    const post = async (path: string, body: unknown) =>
      (await (
        await fetch(`${served.url}${path}`, {
          method: "POST",
          headers: { ...bearer(alice.key), "content-type": "application/json" },
          body: JSON.stringify(body),
        })
      ).json()) as {
        id: string;
        output: { content: { text: string }[] }[];
      };
    const conversation = await post("/v1/conversations", { items: [{ type: "message", role: "developer", content: "Be brief." }] });
    const response = await post("/v1/responses", {
      model: "any",
      conversation: conversation.id,
      input: "Made through the Conversations API",
      max_output_tokens: 4,
      temperature: 0,
    });

    const page = await open();
    await signIn(page, "another");
    const entry = page.locator(`#conversation-list li[data-id="${conversation.id}"]`);
    await entry.waitFor();
    expect(await entry.locator(".title").textContent()).toBe("Made through the Conversations API");
    await entry.locator(".open").click();
    // Its user and assistant messages; the developer message is an item the page does not show.
    await until(async () => (await texts(page, "#log .body")).length === 2, "the conversation's messages to be shown");
    expect(await texts(page, "#log .body")).toEqual(["Made through the Conversations API", response.output[0]!.content[0]!.text]);
  });

  const HOSTILE = [
    "Here is the code:",
    "",
    "```js",
    'const safe = 1 < 2 && "<b>not bold</b>";',
    "```",
    "",
    "| name | value |",
    "|---|---|",
    "| a | 1 |",
    "",
    "- one",
    "- two",
    "",
    "<script>window.pwned = 'script'</script>",
    '<img src="x" onerror="window.pwned = \'img\'">',
    "",
    "[docs](https://example.com/docs) and [bad](javascript:window.pwned='link')",
  ].join("\n");

  /** What every rendering of HOSTILE must show, and never do. */
  async function expectSafeMarkdown(page: Page): Promise<void> {
    const body = page.locator("#log .assistant .body").last();
    expect(await body.locator(".code-block pre code").textContent()).toBe('const safe = 1 < 2 && "<b>not bold</b>";\n');
    expect(await body.locator(".code-block button.copy").count()).toBe(1);
    expect(await body.locator("table td").allTextContents()).toEqual(["a", "1"]);
    expect(await body.locator("ul li").allTextContents()).toEqual(["one", "two"]);
    // Raw HTML is shown as text, never parsed: no script, no image, no handler ran.
    expect(await page.locator("#log script, #log img, #log [onerror], #log b").count()).toBe(0);
    expect(await body.textContent()).toContain("<script>window.pwned = 'script'</script>");
    expect(await page.evaluate("window.pwned")).toBeUndefined();
    const link = body.locator('a[href="https://example.com/docs"]');
    expect(await link.getAttribute("target")).toBe("_blank");
    expect(await link.getAttribute("rel")).toBe("noopener noreferrer");
    expect(await body.locator('a[href^="javascript"]').count()).toBe(0);
  }

  test("a stored reply's Markdown is rendered safely; its code block has a Copy button", async () => {
    await storeConversation("markdown-1", Date.parse("2026-02-01T00:00:00Z"), ["Show me code", HOSTILE]);
    const page = await open();
    await context!.grantPermissions(["clipboard-read", "clipboard-write"]);
    await signIn(page, "markdown-1");
    await page.locator("#log .assistant .code-block").waitFor();
    await expectSafeMarkdown(page);

    await page.click("#log .code-block button.copy");
    await until(async () => (await page.textContent("#log .code-block button.copy")) === "Copied", "the copy to be confirmed");
    expect(await page.evaluate("navigator.clipboard.readText()")).toBe('const safe = 1 < 2 && "<b>not bold</b>";\n');
  });

  test("a streamed reply's Markdown goes through the same rendering, with the same safety", async () => {
    const page = await open();
    await signIn(page, "markdown-stream");
    const message = storedMessage("markdown-stream");
    const question = message(900_001, "user", "Stream me code");
    const answer = message(900_002, "assistant", HOSTILE);
    // The server's stream, cut into small deltas that split the code block and the payloads.
    const deltas = HOSTILE.match(/[\s\S]{1,7}/g)!;
    const body = [
      sse("start", { conversation_id: "markdown-stream", new_conversation: true, user_message: question, model: "test" }),
      ...deltas.map((content) => sse("delta", { content })),
      sse("done", {
        conversation_id: "markdown-stream",
        new_conversation: true,
        message: answer,
        user_message: question,
        usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
        model: "test",
      }),
    ].join("");
    await page.route("**/api/v1.0/chat", (route) => route.fulfill({ status: 200, contentType: "text/event-stream", body }));
    await send(page, "Stream me code");
    await page.locator('#log .assistant[data-id="900002"]').waitFor();
    expect(await replySource(page)).toBe(HOSTILE);
    await expectSafeMarkdown(page);
  });

  test("a reasoning model's thought is shown folded above its reply, as plain text, stored and streamed", async () => {
    const thought = "They greet me <b>warmly</b>;\nso I greet back.";
    const conversation = await db.storage.conversations.findOrCreate(alice.userId, "thinking-1");
    await db.storage.conversations.addMessage(conversation, { role: "user", content: "Hi", createdAt: Date.parse("2026-03-01T00:00:00Z") });
    await db.storage.conversations.addMessage(conversation, {
      role: "assistant",
      content: "Hello!",
      reasoning: thought,
      finishReason: "stop",
      createdAt: Date.parse("2026-03-01T00:00:01Z"),
    });
    const page = await open();
    await signIn(page, "thinking-1");
    const stored = page.locator("#log .assistant details.reasoning");
    await stored.waitFor();
    expect(await stored.getAttribute("open")).toBeNull();
    expect(await page.locator("#log .assistant .thought").isVisible()).toBe(false);
    expect(await page.textContent("#log .assistant .thought")).toBe(thought);
    expect(await page.locator("#log .assistant .thought b").count()).toBe(0);
    await page.click("#log .assistant details.reasoning summary");
    expect(await page.locator("#log .assistant .thought").isVisible()).toBe(true);

    const message = storedMessage("thinking-1", thought);
    const question = message(900_011, "user", "Again");
    const answer = message(900_012, "assistant", "Hello again!");
    const body = [
      sse("start", { conversation_id: "thinking-1", new_conversation: false, user_message: question, model: "test" }),
      ...thought.match(/[\s\S]{1,5}/g)!.map((content) => sse("reasoning", { content })),
      ...["Hello", " again!"].map((content) => sse("delta", { content })),
      sse("done", {
        conversation_id: "thinking-1",
        new_conversation: false,
        message: answer,
        user_message: question,
        usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
        model: "test",
      }),
    ].join("");
    await page.route("**/api/v1.0/chat", (route) => route.fulfill({ status: 200, contentType: "text/event-stream", body }));
    await send(page, "Again");
    const streamed = page.locator('#log .assistant[data-id="900012"]');
    await streamed.waitFor();
    expect(await streamed.locator("details.reasoning").getAttribute("open")).toBeNull();
    expect(await streamed.locator(".thought").textContent()).toBe(thought);
    expect(await streamed.locator(".body").getAttribute("data-source")).toBe("Hello again!");
  });

  test("with MCP servers named, a call of a server's tool and its result are shown folded in the reply, as plain text", async () => {
    const page = await open();
    await signIn(page, "tools-1");
    await page.fill("#tools", " weather , local ");
    const hostile = '<img src=x onerror="alert(1)"> {"output": []}';
    const call = { id: "mcp_1", server: "weather", name: "lookup", arguments: '{"city":"Paris"}' };
    const made = { ...call, output: hostile, error: null };
    const failed = { id: "mcp_2", server: "local", name: "echo", arguments: '{"city":"Rome"}', output: null, error: { type: "tool", message: "down" } };
    const message = storedMessage("tools-1");
    const question = message(900_021, "user", "Weather?");
    const body = [
      sse("start", { conversation_id: "tools-1", new_conversation: true, user_message: question, model: "test" }),
      sse("tool_call", call),
      sse("tool_result", made),
      sse("delta", { content: "Sunny." }),
      sse("done", {
        conversation_id: "tools-1",
        new_conversation: true,
        message: message(900_022, "assistant", "Sunny."),
        user_message: question,
        tool_calls: [made, failed],
        usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
        model: "test",
      }),
    ].join("");
    const sent: unknown[] = [];
    await page.route("**/api/v1.0/chat", (route) => {
      sent.push(route.request().postDataJSON());
      return route.fulfill({ status: 200, contentType: "text/event-stream", body });
    });
    await send(page, "Weather?");
    const reply = page.locator('#log .assistant[data-id="900022"]');
    await reply.waitFor();
    expect(sent).toEqual([expect.objectContaining({ tools: ["weather", "local"] })]);
    const calls = reply.locator("details.tool-call");
    expect(await calls.count()).toBe(2);
    expect(await calls.first().getAttribute("open")).toBeNull();
    expect(await calls.first().locator("summary").textContent()).toBe("weather: lookup");
    expect(await calls.first().locator(".arguments").textContent()).toBe(call.arguments);
    expect(await calls.first().locator(".result").textContent()).toBe(hostile);
    expect(await calls.first().locator("img").count()).toBe(0);
    expect(await calls.nth(1).getAttribute("data-outcome")).toBe("error");
    expect(await calls.nth(1).locator(".result").textContent()).toBe("tool error: down");
    await calls.first().locator("summary").click();
    expect(await calls.first().locator(".result").isVisible()).toBe(true);
  });

  test("a chat with a real family's model: qwen3-thinking's thought folded above its answer, as stored, no template text shown", async () => {
    const page = await open({ server: thinking!.served });
    await signIn(page, "qwen3-1");
    await send(page, "Hello there!");
    const reply = page.locator("#log .assistant[data-id]");
    await reply.waitFor();

    const [answer, question] = await stored("qwen3-1");
    expect(question).toMatchObject({ role: "user", content: "Hello there!" });
    expect(answer).toMatchObject({ role: "assistant", finish_reason: "stop" });
    expect(answer!.reasoning!.length).toBeGreaterThan(0);
    expect(await reply.getAttribute("data-id")).toBe(String(answer!.id));
    expect(await reply.locator(".body").getAttribute("data-source")).toBe(answer!.content);
    expect(await reply.locator("details.reasoning").getAttribute("open")).toBeNull();
    expect(await reply.locator(".thought").textContent()).toBe(answer!.reasoning!);
    expect(await reply.locator(".thought").isVisible()).toBe(false);
    const shown = (await page.textContent("#log")) ?? "";
    for (const marker of ["<think>", "</think>", "<|im_end|>", "<|im_start|>"]) expect(shown).not.toContain(marker);
  });
});

/** One Server-Sent Event, as the server writes it. */
const sse = (event: string, data: unknown) => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;

const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => `message ${from + i}`);
