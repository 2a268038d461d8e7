// A reply's Markdown as DOM. Models write Markdown (lists, code, tables); what they write is
// untrusted, so it goes through two fences: the parser shows raw HTML as text, and DOMPurify
// cleans whatever HTML the parser produced (links with `javascript:` URLs, say) before any of it
// is a node in the page. Images become links: the page's CSP loads nothing from elsewhere.
import DOMPurify, { type Config } from "dompurify";
import { Marked } from "marked";

const ESCAPES: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
const escapeHtml = (text: string) => text.replace(/[&<>"']/g, (char) => ESCAPES[char]!);

const marked = new Marked({
  gfm: true,
  // A chat reply's single newlines are meant as line breaks.
  breaks: true,
  async: false,
  renderer: {
    html: ({ text }) => escapeHtml(text),
    image: ({ href, text }) => `<a href="${escapeHtml(href)}">${escapeHtml(text || href)}</a>`,
  },
});

const purifier = DOMPurify(window);
purifier.addHook("afterSanitizeAttributes", (node) => {
  // Links leave the page, which holds the key: a new tab that cannot reach back, with no referrer.
  if (node.tagName === "A") {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  }
});

const SANITIZE: Config & { RETURN_DOM_FRAGMENT: true } = {
  RETURN_DOM_FRAGMENT: true,
  // Nothing that loads, runs, submits or styles itself past the CSP; no ids to clash with the page's.
  FORBID_TAGS: ["img", "picture", "video", "audio", "source", "iframe", "form", "input", "button", "textarea", "select", "style"],
  FORBID_ATTR: ["style", "id", "name"],
};

/** `source` rendered and sanitized; code blocks get a Copy button. */
export function renderMarkdown(source: string): DocumentFragment {
  const html = (marked.parse(source) as string).trim();
  const fragment = purifier.sanitize(html, SANITIZE);
  for (const pre of fragment.querySelectorAll("pre")) addCopyButton(pre);
  return fragment;
}

function addCopyButton(pre: HTMLPreElement): void {
  const block = document.createElement("div");
  block.className = "code-block";
  pre.before(block);
  const button = document.createElement("button");
  button.type = "button";
  button.className = "copy";
  button.textContent = "Copy";
  button.setAttribute("aria-label", "Copy code");
  button.addEventListener("click", () => void copy(pre.textContent ?? "", button));
  block.append(button, pre);
}

async function copy(text: string, button: HTMLButtonElement): Promise<void> {
  try {
    await navigator.clipboard.writeText(text);
    button.textContent = "Copied";
  } catch {
    button.textContent = "Copy failed";
  }
  setTimeout(() => (button.textContent = "Copy"), 1500);
}
