/** Reads a `text/event-stream` response, stamping each event with the time it arrived. */

export interface TimedEvent {
  event: string;
  data: string;
  /** performance.now() when the event's last line arrived. */
  at: number;
}

export async function* readSse(response: Response): AsyncGenerator<TimedEvent> {
  if (!response.ok || !response.body) throw new Error(`stream failed: HTTP ${response.status} ${await response.text()}`);
  const decoder = new TextDecoder();
  let buffer = "";
  let event = "message";
  let data: string[] = [];
  const reader = response.body.getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let newline: number;
    while ((newline = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, newline).replace(/\r$/, "");
      buffer = buffer.slice(newline + 1);
      if (line === "") {
        if (data.length > 0) yield { event, data: data.join("\n"), at: performance.now() };
        event = "message";
        data = [];
      } else if (line.startsWith("event:")) {
        event = line.slice(6).trim();
      } else if (line.startsWith("data:")) {
        data.push(line.slice(5).replace(/^ /, ""));
      }
    }
  }
}
