/** Notes against a live keepmem: put, batch, find, list paging, versions, tags, delete, memories. */

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { Keepmem, NotFoundError, type Note } from "@keepmem/client";

import { client, need, unique } from "./env.js";

describe("notes", () => {
  const project = unique("ts");
  const km = client({ project });

  it("puts, gets and finds a note", async () => {
    const note = await km.put("OAuth2 uses PKCE for public clients", { id: "auth", tags: { topic: "auth" } });
    assert.equal(note.id, "auth");
    assert.equal(note.tags["topic"], "auth");
    assert.equal(note.changed, true);
    const again = await km.get("auth");
    assert.equal(again.summary, "OAuth2 uses PKCE for public clients");
    const whole = await km.put({ id: "whole", content: "a note given as one object" });
    assert.equal(whole.id, "whole");

    const found = await km.find("PKCE", { stages: "text", half_life_days: 0 });
    assert.equal(found.mode, "text");
    assert.equal(found.notes[0]?.id, "auth");
    assert.ok(typeof found.notes[0]?.score === "number");
    const none = await km.find("PKCE", { stages: "text", tags: { topic: "other" } });
    assert.deepEqual(none.notes, []);
  });

  it("keeps versions of a note whose content changes", async () => {
    await km.put("first wording", { id: "v" });
    await km.put("second wording", { id: "v" });
    const unchanged = await km.put("second wording", { id: "v" });
    assert.equal(unchanged.changed, false);
    await km.put("third wording", { id: "v" });
    const versions = await km.versions("v");
    assert.equal(versions.count, 2);
    assert.deepEqual(
      versions.versions.map((v) => [v.offset, v.summary]),
      [
        [1, "second wording"],
        [2, "first wording"],
      ],
    );
    const older = await km.versions("v", { offset: 1, limit: 1 });
    assert.deepEqual(older.versions.map((v) => v.summary), ["first wording"]);
    assert.equal((await km.get("v@V{1}")).summary, "second wording");
    const reverted = await km.delete("v", { deleteVersions: false });
    assert.equal(reverted.reverted, true);
    assert.equal((await km.get("v")).summary, "second wording");
  });

  it("changes tags in place", async () => {
    await km.put("a note to tag", { id: "tagged", tags: { topic: "x", keep: "yes" } });
    const tagged = await km.tag("tagged", { status: "open", area: ["api", "sdk"] });
    assert.equal(tagged.tags["status"], "open");
    assert.deepEqual([...(tagged.tags["area"] as string[])].sort(), ["api", "sdk"]);
    const removed = await km.tag("tagged", null, { remove: ["keep"], removeValues: { area: "api" } });
    assert.equal(removed.tags["keep"], undefined);
    assert.equal(removed.tags["area"], "sdk");
    assert.equal((await km.versions("tagged")).count, 0); // tags change in place
    const listed = await km.list({ tags: { status: "open" } });
    assert.deepEqual(listed.notes.map((n) => n.id), ["tagged"]);
  });

  it("stores a batch, each note on its own", async () => {
    const notes = Array.from({ length: 7 }, (_, i) => ({ id: `turn-${i}`, content: `turn ${i}`, tags: { kind: "turn" } }));
    const batch = await km.putMany([...notes, { id: "bad;id", content: "refused" }]);
    assert.equal(batch.stored, 7);
    assert.equal(batch.failed, 1);
    assert.equal(batch.results.length, 8);
    assert.equal(batch.results[0]?.note?.id, "turn-0");
    assert.equal(batch.results[7]?.status, 400);
    assert.ok(batch.results[7]?.code);
  });

  it("pages through a list", async () => {
    const first = await km.list({ prefix: "turn-", limit: 3, orderBy: "id" });
    assert.equal(first.count, 3);
    assert.deepEqual(first.notes.map((n) => n.id), ["turn-0", "turn-1", "turn-2"]);
    assert.ok(first.next_cursor);
    const second = await km.list({ prefix: "turn-", limit: 3, orderBy: "id", cursor: first.next_cursor ?? undefined });
    assert.deepEqual(second.notes.map((n) => n.id), ["turn-3", "turn-4", "turn-5"]);

    const pages: string[][] = [];
    for await (const page of km.pages({ prefix: "turn-", pageSize: 3, orderBy: "id" })) {
      pages.push(page.notes.map((n) => n.id));
    }
    assert.deepEqual(pages, [
      ["turn-0", "turn-1", "turn-2"],
      ["turn-3", "turn-4", "turn-5"],
      ["turn-6"],
    ]);
    const all: Note[] = [];
    for await (const note of km.listAll({ tags: { kind: "turn" }, pageSize: 2 })) all.push(note);
    assert.deepEqual(all.map((n) => n.id).sort(), notes(7));
  });

  it("deletes a note", async () => {
    await km.put("short-lived", { id: "gone" });
    const deleted = await km.delete("gone");
    assert.equal(deleted.deleted, "gone");
    await assert.rejects(km.get("gone"), NotFoundError);
  });

  it("keeps projects and tenants apart", async () => {
    const elsewhere = client({ project: unique("ts-other") });
    await assert.rejects(elsewhere.get("auth"), NotFoundError);
    const other = new Keepmem({ url: need("KEEPMEM_URL"), apiKey: need("KEEPMEM_OTHER_KEY"), project });
    await assert.rejects(other.get("auth"), NotFoundError);
  });

  it("remembers and lists memories", async () => {
    const user = unique("user");
    const done = await km.remember("Ada prefers tea", {
      subject: "Ada",
      attribute: "drink",
      value: "tea",
      kind: "preference",
      user_id: user,
    });
    assert.equal(done.op, "add");
    assert.equal(done.memory.value, "tea");
    const again = await km.remember("Ada prefers tea", { subject: "Ada", attribute: "drink", value: "tea", kind: "preference", user_id: user });
    assert.notEqual(again.op, "add"); // said again: no copy
    const mine = await km.memories({ user_id: user });
    assert.deepEqual(mine.map((m) => m.statement), ["Ada prefers tea"]);
  });
});

function notes(count: number): string[] {
  return Array.from({ length: count }, (_, i) => `turn-${i}`).sort();
}
