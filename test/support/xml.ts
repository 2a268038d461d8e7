/**
 * A strict reader of generated XML (the benchmark's SVG): elements, attributes, text, comments and
 * the declaration, nothing else (no DTD, CDATA or entities beyond the predefined and numeric
 * ones). It throws where a conforming parser would, so a document it reads is well-formed.
 */

export interface XmlElement {
  name: string;
  attributes: Record<string, string>;
  children: XmlElement[];
  /** The element's own text, entities left as written. */
  text: string;
}

const NAME = "[A-Za-z_][\\w.:-]*";
const REFERENCE = /&(?!(?:amp|lt|gt|quot|apos|#\d+|#x[\da-fA-F]+);)/;
const TOKEN = new RegExp(`(<\\?xml[^?]*\\?>)|(<!--[\\s\\S]*?-->)|<(/?)(${NAME})((?:\\s+${NAME}\\s*=\\s*"[^"<]*")*)\\s*(/?)>|([^<]+)`, "y");
const ATTRIBUTE = new RegExp(`(${NAME})\\s*=\\s*"([^"<]*)"`, "g");

export function parseXml(source: string): XmlElement {
  const open: XmlElement[] = [];
  let root: XmlElement | undefined;
  TOKEN.lastIndex = 0;
  while (TOKEN.lastIndex < source.length) {
    const at = TOKEN.lastIndex;
    const match = TOKEN.exec(source);
    if (!match) throw new Error(`not well-formed XML at ${at}: ${JSON.stringify(source.slice(at, at + 40))}`);
    const [, declaration, comment, closing, name, attributes, selfClosing, text] = match;
    const parent = open.at(-1);
    if (declaration !== undefined) {
      if (at !== 0) throw new Error("the XML declaration must come first");
    } else if (comment !== undefined) {
    } else if (text !== undefined) {
      if (REFERENCE.test(text)) throw new Error(`a bare & in text at ${at}`);
      if (parent) parent.text += text;
      else if (text.trim() !== "") throw new Error(`text outside the root element at ${at}`);
    } else if (closing) {
      if (parent?.name !== name) throw new Error(`</${name}> at ${at} closes <${parent?.name ?? "nothing"}>`);
      open.pop();
    } else {
      if (!parent && root) throw new Error(`a second root element <${name}> at ${at}`);
      const element: XmlElement = { name: name!, attributes: {}, children: [], text: "" };
      for (const [, key, value] of attributes!.matchAll(ATTRIBUTE)) {
        if (key! in element.attributes) throw new Error(`attribute ${key} twice on <${name}> at ${at}`);
        if (REFERENCE.test(value!)) throw new Error(`a bare & in attribute ${key} at ${at}`);
        element.attributes[key!] = value!;
      }
      if (parent) parent.children.push(element);
      else root = element;
      if (!selfClosing) open.push(element);
    }
  }
  if (open.length > 0) throw new Error(`<${open.at(-1)!.name}> is never closed`);
  if (!root) throw new Error("no root element");
  return root;
}

/** Every element under `element` (depth first, itself excluded) that `matches`. */
export function findElements(element: XmlElement, matches: (e: XmlElement) => boolean): XmlElement[] {
  return element.children.flatMap((child) => [...(matches(child) ? [child] : []), ...findElements(child, matches)]);
}
