/**
 * Ollama names a model `name:tag`, and a name without a tag means its `latest`: its clients list
 * `parley-demo:latest` and send either spelling (Open WebUI tags every untagged name before it
 * looks it up). Parley's ids carry no tag, so its Ollama routes list each as its `latest` and take
 * both back; an id that has a tag of its own is its own name.
 */
const LATEST = ":latest";

/** A tag is what follows a colon in the last path segment (`host:port/name` has none). */
const tagged = (name: string) => (name.split("/").at(-1) ?? "").includes(":");

/** The name Ollama's clients see for a served id. */
export const ollamaName = (id: string) => (tagged(id) ? id : `${id}${LATEST}`);

/** The served id a client's name stands for; a name that is no served model passes as sent, to be refused by it. */
export function servedId(name: string, ids: readonly string[]): string {
  if (ids.includes(name) || !name.endsWith(LATEST)) return name;
  const bare = name.slice(0, -LATEST.length);
  return ids.includes(bare) ? bare : name;
}

/** The model's name in an answer: as the request spelled it (Ollama echoes it), unless the request's name was not this model's (a server of one model answers any). */
export const answerName = (asked: string, id: string) => (asked === id || asked === ollamaName(id) ? asked : ollamaName(id));
