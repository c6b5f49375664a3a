/**
 * GET /v1/events through the SSE helper, against a live keepmem: a put
 * arrives on an open stream, filters apply, resuming after an event id
 * misses nothing; and the parser on its own (chunks split anywhere).
 */

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { BadRequestError, type ChangeEvent, type EventStream, parseEventStream } from "@keepmem/client";

import { client, unique } from "./env.js";

/** The next `count` events of `stream`, or a failure after `ms`. */
async function take(stream: EventStream, count: number, ms = 20_000): Promise<ChangeEvent[]> {
  const got: ChangeEvent[] = [];
  const timer = setTimeout(() => stream.close(), ms);
  try {
    for await (const event of stream) {
      got.push(event);
      if (got.length >= count) break;
    }
  } finally {
    clearTimeout(timer);
  }
  assert.equal(got.length, count, `${got.length} of ${count} events before the stream ended`);
  return got;
}

describe("events", () => {
  it("an open stream receives a put, then a tag and a delete", async () => {
    const km = client({ project: unique("ts-ev") });
    const stream = await km.events();
    await km.put("the ferry leaves at nine", { id: "ev-a", tags: { topic: "x" } });
    await km.tag("ev-a", { mood: "calm" });
    await km.put("a note to delete", { id: "ev-b", tags: { topic: "y" } });
    await km.delete("ev-b");
    const got = await take(stream, 4);
    assert.deepEqual(
      got.map((e) => [e.kind, e.note_id]),
      [
        ["put", "ev-a"],
        ["tag", "ev-a"],
        ["put", "ev-b"],
        ["delete", "ev-b"],
      ],
    );
    // Events show the note as it is when sent; a deleted one as it was.
    assert.match(got[0]?.summary ?? "", /ferry/);
    assert.deepEqual(got[1]?.tags, { topic: "x", mood: "calm" });
    assert.equal(got[3]?.summary, "a note to delete");
    assert.equal(stream.lastEventId, got[3]?.id);
    assert.ok(stream.closed); // the break closed it
  });

  it("filters by kind and tag, and resumes after an event id", async () => {
    const km = client({ project: unique("ts-ev") });
    const puts = await km.events({ kinds: ["put"], tags: { topic: "work" } });
    await km.put("at the office", { id: "w1", tags: { topic: "work" } });
    await km.put("at home", { id: "h1", tags: { topic: "home" } });
    await km.tag("w1", { seen: "yes" });
    await km.put("back at work", { id: "w2", tags: { topic: "work" } });
    const got = await take(puts, 2);
    assert.deepEqual(got.map((e) => e.note_id), ["w1", "w2"]);

    // Written while nobody watched: a stream after the first event sees the rest.
    const resumed = await km.events({ kinds: ["put"], after: got[0]?.id });
    const again = await take(resumed, 2);
    assert.deepEqual(again.map((e) => e.note_id), ["h1", "w2"]);
  });

  it("a bad cursor is refused when the stream opens", async () => {
    const km = client();
    await assert.rejects(km.events({ after: "not-an-event" }), BadRequestError);
  });

  it("an abort signal ends the iteration", async () => {
    const km = client({ project: unique("ts-ev") });
    const controller = new AbortController();
    const stream = await km.events({ signal: controller.signal });
    setTimeout(() => controller.abort(), 100);
    const got: ChangeEvent[] = [];
    for await (const event of stream) got.push(event);
    assert.deepEqual(got, []);
    assert.ok(stream.closed);
  });
});

function streamOf(...chunks: string[]): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  return new ReadableStream({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(encoder.encode(chunk));
      controller.close();
    },
  });
}

describe("the event-stream parser", () => {
  it("reads messages split anywhere, CRLF or LF, skipping comments", async () => {
    const text = 'retry: 2000\n: stream open\n\nid: 1\nevent: put\ndata: {"a":\ndata: 1}\n\r\n: keepalive\r\n\r\nid: 2\r\nevent: tag\r\ndata: x\r\n\r\ndata: last\n\n';
    for (const size of [1, 2, 3, 7, text.length]) {
      const chunks = [];
      for (let i = 0; i < text.length; i += size) chunks.push(text.slice(i, i + size));
      const got = [];
      for await (const message of parseEventStream(streamOf(...chunks))) got.push(message);
      assert.deepEqual(got, [
        { event: "put", data: '{"a":\n1}', id: "1", retry: 2000 },
        { event: "tag", data: "x", id: "2", retry: 2000 },
        { event: "message", data: "last", id: "2", retry: 2000 },
      ], `chunks of ${size}`);
    }
  });

  it("drops a message the stream ended in the middle of", async () => {
    const got = [];
    for await (const message of parseEventStream(streamOf("data: whole\n\ndata: half"))) got.push(message.data);
    assert.deepEqual(got, ["whole"]);
  });
});
