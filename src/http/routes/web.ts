import { basename } from "node:path";
import { Elysia } from "elysia";
// An HTML import: inside the single binary Bun has already bundled the page (its `files`); from a
// checkout it is bundled here once, on the first request. Either way nothing is fetched elsewhere.
import page from "../../web/index.html";
import { documentResponse } from "../openapi";

interface Asset {
  name: string;
  text: string;
}

async function assets(): Promise<Asset[]> {
  if (page.files) {
    return Promise.all(page.files.map(async (file) => ({ name: basename(file.path), text: await Bun.file(file.path).text() })));
  }
  const result = await Bun.build({ entrypoints: [page.index], minify: true });
  if (!result.success) throw new AggregateError(result.logs, "cannot bundle the web page");
  return Promise.all(result.outputs.map(async (output) => ({ name: basename(output.path), text: await output.text() })));
}

const sha256 = (text: string) => `'sha256-${new Bun.CryptoHasher("sha256").update(text).digest("base64")}'`;

/**
 * One self-contained document: script and styles inlined, so `/` is the page's only route and
 * only request. The inline parts are pinned by hash in the Content-Security-Policy, which also
 * keeps the page (and the key pasted into it) out of frames.
 */
async function build(): Promise<{ html: string; csp: string }> {
  const files = await assets();
  const byName = new Map(files.map((file) => [file.name, file.text]));
  const inline = (reference: string | null) => {
    const text = reference === null ? undefined : byName.get(basename(reference));
    if (text === undefined) throw new Error(`the web page refers to ${reference}, which the bundle lacks`);
    if (/<\/(script|style)/i.test(text)) throw new Error(`${reference} cannot be inlined: it contains a closing tag`);
    return text;
  };
  const hashes = { script: [] as string[], style: [] as string[] };
  const html = new HTMLRewriter()
    .on("script[src]", {
      element(element) {
        const js = inline(element.getAttribute("src"));
        hashes.script.push(sha256(js));
        element.replace(`<script type="module">${js}</script>`, { html: true });
      },
    })
    .on('link[rel="stylesheet"]', {
      element(element) {
        const css = inline(element.getAttribute("href"));
        hashes.style.push(sha256(css));
        element.replace(`<style>${css}</style>`, { html: true });
      },
    })
    .transform(files.find((file) => file.name.endsWith(".html"))!.text);
  const csp = [
    "default-src 'none'",
    `script-src ${hashes.script.join(" ")}`,
    `style-src ${hashes.style.join(" ")}`,
    "connect-src 'self'",
    // Pictures sent with messages, shown from their data URLs.
    "img-src data:",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join("; ");
  return { html, csp };
}

let built: Promise<{ html: string; csp: string }> | undefined;

/** `GET /`: the built-in chat page (src/web/). */
export const webRoutes = () =>
  new Elysia({ name: "parley/routes/web" }).get(
    "/",
    async () => {
      const { html, csp } = await (built ??= build());
      return new Response(html, {
        headers: {
          "content-type": "text/html; charset=utf-8",
          "cache-control": "no-cache",
          "content-security-policy": csp,
          "referrer-policy": "no-referrer",
          "x-content-type-options": "nosniff",
        },
      });
    },
    {
      detail: {
        summary: "The web page: chat with the service from a browser (a key is pasted into it)",
        responses: { "200": documentResponse("The page, its script and styles inlined", "text/html") },
      },
    },
  );
