/**
 * Server-Sent Events read from a fetch body: EventSource cannot send an
 * `Authorization` header, so the stream is parsed here (the WHATWG rules:
 * `field: value` lines, a blank line ends a message, `:` lines are comments)
 * from a `ReadableStream`, as Node 20 and browsers both give it.
 */

/** One message of a `text/event-stream`. */
export interface ServerSentEvent {
  /** The `event:` field (`message` when none). */
  event: string;
  /** The `data:` lines, joined by newlines. */
  data: string;
  /** The `id:` field, when the message had one. */
  id: string | undefined;
  /** The stream's last `retry:` field (milliseconds: how long to wait before reconnecting). */
  retry: number | undefined;
}

/** The messages of an event stream, as they arrive. */
export async function* parseEventStream(
  body: ReadableStream<Uint8Array>,
): AsyncGenerator<ServerSentEvent, void, undefined> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let event = "";
  let data: string[] = [];
  let id: string | undefined;
  let retry: number | undefined;
  let seen = false; // a field of the message being read
  try {
    for (;;) {
      const { done, value } = await reader.read();
      buffer += done ? decoder.decode() : decoder.decode(value, { stream: true });
      // A line ends at CRLF, LF or CR; a CR at the very end may be half a CRLF.
      const lines = buffer.split(/\r\n|\n|\r(?!$)/);
      buffer = done ? "" : (lines.pop() ?? "");
      for (const line of lines) {
        if (line === "") {
          if (seen && data.length > 0) {
            yield { event: event || "message", data: data.join("\n"), id, retry };
          }
          event = "";
          data = [];
          seen = false;
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        seen = true;
        if (field === "event") event = value;
        else if (field === "data") data.push(value);
        else if (field === "id" && !value.includes("\0")) id = value;
        else if (field === "retry" && /^\d+$/.test(value)) retry = Number(value);
      }
      if (done) return;
    }
  } finally {
    // Leaving early (break, an abort) cancels the body: the connection closes.
    await reader.cancel().catch(() => undefined);
  }
}
