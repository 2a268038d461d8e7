/** Reads a `text/event-stream` response as its events arrive. */

export interface TimedEvent {
  event: string;
  data: string;
  /** performance.now() when the event's last line arrived. */
  at: number;
}

export interface SseEvent {
  event: string;
  data: unknown;
}

/**
 * Every event with its data lines joined; a comment line becomes `{ event: "comment" }` with its
 * text. Stopping early cancels the body, which to the server is a disconnect.
 */
export async function* sseEvents(response: Response): AsyncGenerator<TimedEvent> {
  const decoder = new TextDecoder();
  let buffer = "";
  let event = "message";
  let data: string[] = [];
  for await (const chunk of response.body!) {
    buffer += decoder.decode(chunk, { stream: true });
    let newline: number;
    while ((newline = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, newline).replace(/\r$/, "");
      buffer = buffer.slice(newline + 1);
      if (line === "") {
        if (data.length > 0) yield { event, data: data.join("\n"), at: performance.now() };
        event = "message";
        data = [];
      } else if (line.startsWith(":")) {
        yield { event: "comment", data: line.slice(1).trim(), at: performance.now() };
      } else if (line.startsWith("event:")) {
        event = line.slice(6).trim();
      } else if (line.startsWith("data:")) {
        data.push(line.slice(5).replace(/^ /, ""));
      }
    }
  }
}

/** Parley's events: the data of each is JSON. */
export async function* readSse(response: Response): AsyncGenerator<SseEvent> {
  for await (const { event, data } of sseEvents(response)) yield { event, data: event === "comment" ? data : JSON.parse(data) };
}
