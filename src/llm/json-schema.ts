/**
 * The JSON Schemas a reply can be held to: the subset node-llama-cpp's JSON-schema grammar
 * enforces token by token. A schema is checked whole before any reply starts, and a keyword the
 * grammar cannot enforce is refused with its place in the schema: a constraint is never dropped
 * without the client knowing. Annotations, which constrain nothing, are accepted.
 */
import type { GbnfJsonSchema } from "node-llama-cpp";
import { type Field, InvalidInput } from "../errors";
import { patternRule } from "./pattern-grammar";

/** Keywords that say what a value is for, not what it may be. */
const ANNOTATIONS = new Set(["title", "description", "$comment", "$schema", "$id", "examples", "default", "deprecated", "readOnly", "writeOnly"]);

const SCALAR_TYPES = new Set(["string", "number", "integer", "boolean", "null"]);

/** What the grammar enforces, per kind of schema. */
const ENFORCED: Record<string, ReadonlySet<string>> = {
  string: new Set(["type", "minLength", "maxLength", "format", "pattern"]),
  object: new Set(["type", "properties", "required", "additionalProperties", "minProperties", "maxProperties"]),
  array: new Set(["type", "items", "prefixItems", "minItems", "maxItems"]),
  scalar: new Set(["type"]),
};

/**
 * The largest integer the grammar writes (Engine's JSON grammar allows 15 digits and no exponent):
 * a bound at or beyond it is enforced by the grammar already, as zod's safe-integer bounds are.
 */
export const GRAMMAR_INTEGER_BOUND = 10 ** 15 - 1;

/**
 * Formats Parley writes itself, node-llama-cpp's grammar knowing none of them (a `pattern` is
 * written the same way, pattern-grammar.ts). An address's parts are bounded: a model that never
 * wants to end a name cannot write on past them, and each stays within RFC 5321's lengths (and
 * ajv's `email`).
 */
const OWN_FORMATS: Record<string, string> = {
  uuid: '"\\"" [0-9a-f]{8} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{12} "\\""',
  email: '"\\"" [a-z0-9]{1,32} ("." [a-z0-9]{1,16}){0,2} "@" [a-z0-9]{1,32} ("." [a-z0-9]{1,16}){0,2} "." [a-z]{2,8} "\\""',
};
/**
 * A string node-llama-cpp's grammar cannot write, given to it as a constant that carries the GBNF
 * of the whole JSON string; `withOwnRules` puts that rule in place of the constant's literal.
 */
const ownRule = (rule: string) => ({ const: `parley-rule-${Buffer.from(rule).toString("base64url")}` });
const OWN_RULE_LITERAL = /"\\"parley-rule-([A-Za-z0-9_-]+)\\""/g;

/** The string formats the grammar writes: node-llama-cpp's, and Parley's own. */
const FORMATS = new Set(["date-time", "time", "date", ...Object.keys(OWN_FORMATS)]);

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type SchemaObject = { [key: string]: Json };

/**
 * What a schema may hold, so that its grammar is built in milliseconds and enforces what it says:
 * llama.cpp's grammar parser refuses a repetition of over 2,000 and takes a larger maximum as none
 * at all, node-llama-cpp's converter gives up past 512 nested scopes, and the grammar's size grows
 * with the schema's. docs/API.md lists them.
 */
export const SCHEMA_LIMITS = {
  /** Schemas nested in one another, the root's 1, counted through `$ref`s. */
  depth: 32,
  /** `minLength`, `maxLength`, `minItems`, `maxItems`, `minProperties`, `maxProperties`. */
  repetition: 1000,
  /** Subschemas, properties and `enum` values of one request's schemas together. */
  elements: 10_000,
} as const;

const REPETITIONS = ["minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"] as const;

/** How many more elements a request's schemas may have: one budget for all of a request's tools. */
export interface SchemaBudget {
  elements: number;
}

export const schemaBudget = (): SchemaBudget => ({ elements: SCHEMA_LIMITS.elements });

/** How a schema is held: `strict`, every keyword enforced or the schema refused; else the keywords the grammar enforces, the rest advisory. */
export interface SchemaOptions {
  strict: boolean;
  /** The request's budget of elements, shared by all of its schemas. */
  budget?: SchemaBudget;
}

/**
 * The schema as node-llama-cpp's grammar takes it. Strict, a keyword it cannot enforce is
 * `InvalidInput` naming `field` and the keyword; otherwise that keyword is advisory and left out
 * of the grammar (as OpenAI does not guarantee a schema that is not strict): an unknown keyword, a
 * format or bound the grammar does not write, a repetition past `SCHEMA_LIMITS`; `oneOf` is then
 * held as `anyOf`. `anyOf` becomes the grammar's alternatives (strict, `oneOf` is refused: no
 * grammar checks that exactly one alternative matches). A schema nested past the depth limit, with
 * more elements than the limit, or that refers to itself (no grammar of a fixed size holds it), or
 * one no value satisfies, is refused either way.
 */
export function grammarSchemaOf(schema: unknown, field: Field, { strict, budget = schemaBudget() }: SchemaOptions): GbnfJsonSchema {
  const refuse = (at: string, why: string): never => {
    throw new InvalidInput(field, `the schema ${at === "" ? "" : `at ${at} `}${why}`);
  };
  /** What the grammar cannot hold: strict, a refusal; else `node` without `keywords`, which stay advisory. */
  const unenforced = (node: SchemaObject, keywords: readonly string[], at: string, why: string) => {
    if (strict) refuse(at, `${why} (without strict, it would be advisory)`);
    for (const keyword of keywords) delete node[keyword];
  };
  const spend = (at: string, elements: number) => {
    budget.elements -= elements;
    if (budget.elements < 0)
      refuse(
        at,
        `takes the request's schemas past ${SCHEMA_LIMITS.elements} elements (subschemas, properties and enum values), the most Parley holds a reply to`,
      );
  };
  if (!isObject(schema)) return refuse("", "must be a JSON object");
  const defs = isObject(schema.$defs) ? schema.$defs : {};
  const convert = (node: Json, at: string, depth: number): Json => {
    if (!isObject(node)) return refuse(at, "must be an object (true and false are not enforceable)");
    if (depth > SCHEMA_LIMITS.depth) return refuse(at, `is nested past the depth limit of ${SCHEMA_LIMITS.depth} schemas`);
    spend(at, 1);
    const out: SchemaObject = {};
    for (const [keyword, value] of Object.entries(node)) {
      if (ANNOTATIONS.has(keyword)) {
        if (keyword === "description" && typeof value === "string") out.description = value;
        continue;
      }
      if (keyword === "$defs") {
        if (!isObject(value)) return refuse(at, "has $defs that is not an object");
        out.$defs = Object.fromEntries(Object.entries(value).map(([name, def]) => [name, convert(def, `${at}/$defs/${name}`, depth + 1)]));
        continue;
      }
      out[keyword] = value;
    }
    for (const keyword of REPETITIONS) {
      const count = out[keyword];
      if (count === undefined) continue;
      if (typeof count !== "number" || !Number.isInteger(count) || count < 0)
        return refuse(at, `has "${keyword}" ${JSON.stringify(count)}, which is not a count`);
      if (count > SCHEMA_LIMITS.repetition)
        unenforced(out, [keyword], at, `has "${keyword}" ${count}: at most ${SCHEMA_LIMITS.repetition} repetitions are enforced`);
    }
    if (!strict && "oneOf" in out && !("anyOf" in out)) {
      out.anyOf = out.oneOf!;
      delete out.oneOf;
    }
    return shape(out, at, depth);
  };
  const shape = (node: SchemaObject, at: string, depth: number): Json => {
    const { type, $defs, description } = node;
    // node-llama-cpp would quietly raise a maximum below its minimum (and below what it must write)
    // to it: such a schema no value satisfies, and is refused rather than held to another one.
    const atLeast = (lower: number, maximum: string, what: string) => {
      const upper = node[maximum];
      if (typeof upper === "number" && upper < lower) refuse(at, `has "${maximum}" ${upper}, below ${what} (${lower}): no value satisfies it`);
    };
    const count = (keyword: string) => (typeof node[keyword] === "number" ? (node[keyword] as number) : 0);
    atLeast(count("minLength"), "maxLength", "its minLength");
    atLeast(count("minItems"), "maxItems", "its minItems");
    atLeast(Array.isArray(node.prefixItems) ? node.prefixItems.length : 0, "maxItems", "its prefixItems");
    atLeast(count("minProperties"), "maxProperties", "its minProperties");
    // The grammar writes every property listed.
    atLeast(isObject(node.properties) ? Object.keys(node.properties).length : 0, "maxProperties", "its properties, which the grammar always writes");
    const keep = { ...($defs !== undefined ? { $defs } : {}), ...(description !== undefined ? { description } : {}) };
    const only = (allowed: readonly string[]) => {
      const extra = Object.keys(node).filter((keyword) => keyword !== "$defs" && keyword !== "description" && !allowed.includes(keyword));
      if (extra.length > 0) unenforced(node, extra, at, `has "${extra[0]}", which Parley cannot enforce`);
    };
    if ("$ref" in node) {
      only(["$ref"]);
      const ref = node.$ref;
      if (typeof ref !== "string" || !/^#\/\$defs\/[^/]+$/.test(ref) || !(ref.slice("#/$defs/".length) in defs))
        return refuse(at, "has a $ref other than #/$defs/<a name it defines>");
      return { ...keep, $ref: ref };
    }
    if ("const" in node) {
      only(["const"]);
      if (!isScalar(node.const)) return refuse(at, "has a const that is not a string, number, boolean or null");
      return { ...keep, const: node.const };
    }
    if ("enum" in node) {
      only(["enum", "type"]);
      if (!Array.isArray(node.enum) || node.enum.length === 0 || !node.enum.every(isScalar))
        return refuse(at, "has an enum that is not a non-empty list of strings, numbers, booleans or null");
      spend(at, node.enum.length);
      return { ...keep, enum: node.enum };
    }
    if ("anyOf" in node) {
      only(["anyOf"]);
      if (!Array.isArray(node.anyOf) || node.anyOf.length === 0) return refuse(at, "has an anyOf that is not a non-empty list");
      return { ...keep, oneOf: node.anyOf.map((option, i) => convert(option, `${at}/anyOf/${i}`, depth + 1)) };
    }
    if (Array.isArray(type)) {
      only(["type"]);
      if (type.length === 0 || !type.every((t) => typeof t === "string" && SCALAR_TYPES.has(t)))
        return refuse(at, "has a list of types that are not all string, number, integer, boolean or null");
      return { ...keep, type };
    }
    if (typeof type !== "string")
      return refuse(at, `has no type (or has "${Object.keys(node).find((k) => k !== "$defs" && k !== "description") ?? "nothing"}" without one)`);
    switch (type) {
      case "string":
        only([...ENFORCED.string!]);
        if (node.format !== undefined && !(typeof node.format === "string" && FORMATS.has(node.format)))
          unenforced(node, ["format"], at, `has format ${JSON.stringify(node.format)}; only ${[...FORMATS].join(", ")} are enforced`);
        if (node.format !== undefined && (node.minLength !== undefined || node.maxLength !== undefined))
          unenforced(node, ["minLength", "maxLength"], at, "has a format with a length bound");
        if (node.pattern !== undefined) {
          const rule = typeof node.pattern === "string" ? patternRule(node.pattern, SCHEMA_LIMITS.repetition) : undefined;
          if (rule === undefined)
            unenforced(
              node,
              ["pattern"],
              at,
              `has "pattern" ${JSON.stringify(node.pattern)}, outside the regular subset Parley enforces (^…$ anchored; characters, ., classes, \\d \\w, groups, | and quantifiers)`,
            );
          else {
            const besides = ["format", "minLength", "maxLength"].filter((keyword) => node[keyword] !== undefined);
            if (besides.length > 0) unenforced(node, besides, at, `has "${besides[0]}" beside a pattern`);
            return { ...keep, ...ownRule(rule) };
          }
        }
        if (typeof node.format === "string" && node.format in OWN_FORMATS) return { ...keep, ...ownRule(OWN_FORMATS[node.format]!) };
        return { ...keep, ...node };
      case "object": {
        only([...ENFORCED.object!]);
        const properties = node.properties ?? {};
        if (!isObject(properties)) return refuse(at, "has properties that are not an object");
        const converted = Object.fromEntries(
          Object.entries(properties).map(([name, property]) => [name, convert(property, `${at}/properties/${name}`, depth + 1)]),
        );
        const additional = node.additionalProperties;
        return {
          ...keep,
          ...node,
          properties: converted,
          ...(additional !== undefined && typeof additional !== "boolean"
            ? { additionalProperties: convert(additional, `${at}/additionalProperties`, depth + 1) }
            : {}),
        };
      }
      case "array":
        only([...ENFORCED.array!]);
        return {
          ...keep,
          ...node,
          ...(node.items !== undefined ? { items: convert(node.items, `${at}/items`, depth + 1) } : {}),
          ...(Array.isArray(node.prefixItems) ? { prefixItems: node.prefixItems.map((item, i) => convert(item, `${at}/prefixItems/${i}`, depth + 1)) } : {}),
        };
      case "integer":
        only([...ENFORCED.scalar!, "minimum", "maximum"]);
        if (typeof node.minimum === "number" && node.minimum > -GRAMMAR_INTEGER_BOUND)
          unenforced(node, ["minimum"], at, `has "minimum" ${node.minimum}, which Parley cannot enforce (only bounds beyond ±${GRAMMAR_INTEGER_BOUND})`);
        if (typeof node.maximum === "number" && node.maximum < GRAMMAR_INTEGER_BOUND)
          unenforced(node, ["maximum"], at, `has "maximum" ${node.maximum}, which Parley cannot enforce (only bounds beyond ±${GRAMMAR_INTEGER_BOUND})`);
        return { ...keep, type };
      default:
        if (!SCALAR_TYPES.has(type)) return refuse(at, `has type ${JSON.stringify(type)}`);
        only([...ENFORCED.scalar!]);
        return { ...keep, type };
    }
  };
  const converted = convert(schema, "", 1) as SchemaObject;
  checkRefs(converted, refuse);
  return converted as GbnfJsonSchema;
}

/**
 * Refuses a schema whose `$ref`s lead back to where they start (a recursive schema: a grammar
 * would be built without end) or whose nesting passes the depth limit once they are followed.
 */
function checkRefs(root: SchemaObject, refuse: (at: string, why: string) => never): void {
  const defs = isObject(root.$defs) ? root.$defs : {};
  /** Each definition's own nesting, its references followed. */
  const heights = new Map<string, number>();
  const following: string[] = [];
  const height = (node: Json, at: string): number => {
    if (Array.isArray(node)) return node.reduce<number>((most, item, i) => Math.max(most, height(item, `${at}/${i}`)), 0);
    if (!isObject(node)) return 0;
    if (typeof node.$ref === "string") {
      const name = node.$ref.slice("#/$defs/".length);
      if (following.includes(name))
        refuse(at, `has a $ref that leads back to ${node.$ref} (${[...following, name].join(" → ")}): a recursive schema cannot be held`);
      let own = heights.get(name);
      if (own === undefined) {
        following.push(name);
        own = height(defs[name]!, `/$defs/${name}`);
        following.pop();
        heights.set(name, own);
      }
      return own;
    }
    let below = 0;
    for (const [keyword, value] of Object.entries(node)) {
      // The grammar's alternatives (`oneOf`) are the client's `anyOf`.
      if (keyword === "properties" && isObject(value))
        below = Object.entries(value).reduce((most, [name, property]) => Math.max(most, height(property, `${at}/properties/${name}`)), below);
      else if (keyword === "items" || keyword === "additionalProperties" || keyword === "prefixItems" || keyword === "oneOf")
        below = Math.max(below, height(value, `${at}/${keyword === "oneOf" ? "anyOf" : keyword}`));
    }
    return below + 1;
  };
  for (const name of Object.keys(defs)) height({ $ref: `#/$defs/${name}` }, `/$defs/${name}`);
  const depth = height(root, "");
  if (depth > SCHEMA_LIMITS.depth) refuse("", `is nested past the depth limit of ${SCHEMA_LIMITS.depth} schemas once its $refs are followed (${depth})`);
}

function isObject(value: unknown): value is SchemaObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function isScalar(value: Json | undefined): boolean {
  return value === null || ["string", "number", "boolean"].includes(typeof value);
}

/**
 * A string's character, unescaped: any but `"`, `\`, DEL and the control characters, as
 * node-llama-cpp's rule says, but only a Unicode scalar value. Bytes that decode to no character
 * (a surrogate, beyond U+10FFFF) counted as one character in the grammar, but come out as several
 * U+FFFD in the text, past a `maxLength`.
 */
const TEXT_CHAR = "[\\x20\\x21\\x23-\\x5B\\x5D-\\x7E\\x80-\\uD7FF\\uE000-\\U0010FFFF]";

/** node-llama-cpp's month and day of a date: any day up to 31 in any month, as 11-31. */
const MONTH_DAY = '("0" [1-9] | "1" [012]) "-" ("0" [1-9] | [12] [0-9] | "3" [01])';
/** Only days each month has (February's 29th left out: a grammar cannot tell leap years). */
const CALENDAR_MONTH_DAY =
  '(("0" [13578] | "1" [02]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]) | ("0" [469] | "11") "-" ("0" [1-9] | [12] [0-9] | "30") | "02" "-" ("0" [1-9] | "1" [0-9] | "2" [0-8]))';

/**
 * node-llama-cpp's JSON grammar, changed where it lets a reply be no JSON its schema accepts: its
 * root ends in four or more newlines (so that a model finds its end of generation), which are no
 * part of the JSON, and an integer may have an exponent (`1e999` parses as Infinity, no integer)
 * or 16 digits (beyond the safe integers), a date may be the 31st of November, and a string may
 * hold bytes that are no character. Numbers keep exponents of two digits at most.
 */
export function boundedJsonGrammar(grammar: string): string {
  return withOwnRules(boundedJsonRules(grammar));
}

/** `grammar` with each stand-in constant's literal (`ownRule`) replaced by the rule it carries. */
function withOwnRules(grammar: string): string {
  return grammar.replaceAll(OWN_RULE_LITERAL, (_, encoded: string) => `(${Buffer.from(encoded, "base64url").toString()})`);
}

function boundedJsonRules(grammar: string): string {
  const rules = [
    { rule: "root", from: /^(root ::= .*) "\\n\\n\\n\\n" \[\\n\]\*$/m, to: "$1" },
    {
      rule: "integer-number-rule",
      from: /^integer-number-rule ::= .*$/m,
      to: `integer-number-rule ::= "-"? ("0" | [1-9] [0-9]{0,${String(GRAMMAR_INTEGER_BOUND).length - 1}})`,
    },
    { rule: "string-char-rule", from: /^string-char-rule ::= \[\^"\\\\\\x7F\\x00-\\x1F\]/m, to: `string-char-rule ::= ${TEXT_CHAR}` },
    {
      rule: "fractional-number-rule",
      from: /^(fractional-number-rule ::= .*\(\[eE\] \[-\+\]\? )\("0" \| \[1-9\] \[0-9\]\{0,15\}\)\)\?$/m,
      to: "$1[0-9]{1,2})?",
    },
  ];
  let bounded = grammar;
  if (/^string-format-date(-time)?-rule ::= /m.test(bounded)) {
    if (!bounded.includes(MONTH_DAY)) throw new Error("node-llama-cpp's JSON grammar changed: its dates are not the ones Parley bounds");
    bounded = bounded.replaceAll(MONTH_DAY, CALENDAR_MONTH_DAY);
  }
  for (const { rule, from, to } of rules) {
    if (!bounded.includes(`\n${rule} ::= `) && !bounded.startsWith(`${rule} ::= `)) continue;
    const next = bounded.replace(from, to);
    if (next === bounded) throw new Error(`node-llama-cpp's JSON grammar changed: its ${rule} is not the one Parley bounds`);
    bounded = next;
  }
  return bounded;
}
