"""keep's REST endpoints besides /v1/flow (KEEP_PROTOCOL §3): the strict
ItemContext shape, export (ndjson and JSON), bundles, the change feed and
import."""

from __future__ import annotations

import json
from urllib.parse import quote

ITEM_CONTEXT_KEYS = {
    "item", "viewing_offset", "similar", "meta", "edges", "parts", "focus_part",
    "expand_parts", "prev", "next",
}  # fmt: skip


async def _put(client, tenant, **body) -> dict:
    r = await client.post("/v1/notes", json=body, headers=tenant.headers)
    assert r.status_code == 200, r.text
    return r.json()


async def test_context_has_exactly_keeps_shape(client, tenant) -> None:
    await _put(client, tenant, id="file:///a b/c.md", content="first draft of the plan")
    await _put(client, tenant, id="file:///a b/c.md", content="second draft of the plan")
    await _put(client, tenant, id="line-1", content="Hello there.", tags={"speaker": "Ada"})
    path = "/v1/notes/" + quote("file:///a b/c.md", safe="") + "/context"
    r = await client.get(
        path,
        params={"similar_limit": 3, "versions_limit": 3, "include_similar": "true"},
        headers=tenant.headers,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == ITEM_CONTEXT_KEYS
    assert set(body["item"]) == {"id", "summary", "tags", "score", "changed"}
    assert body["item"]["summary"] == "second draft of the plan"
    assert [set(p) for p in body["prev"]] == [{"offset", "date", "summary"}]
    assert body["prev"][0]["summary"] == "first draft of the plan"
    for s in body["similar"]:
        assert set(s) == {"id", "offset", "score", "date", "summary"}
    # the earlier version in view: the current one is "next"
    r = await client.get(path, params={"version": 1}, headers=tenant.headers)
    viewed = r.json()
    assert viewed["viewing_offset"] == 1 and viewed["item"]["summary"] == "first draft of the plan"
    assert viewed["next"][-1]["offset"] == 0
    # a stub made by an edge tag shows who points at it
    r = await client.get("/v1/notes/Ada/context", headers=tenant.headers)
    edges = r.json()["edges"]
    assert list(edges) == ["said"]
    assert [set(e) for e in edges["said"]] == [{"source_id", "date", "summary"}]
    assert edges["said"][0]["source_id"] == "line-1"
    r = await client.get("/v1/notes/missing/context", headers=tenant.headers)
    assert r.status_code == 404


async def test_get_flow_reports_edges(client, tenant) -> None:
    await _put(client, tenant, id="line-2", content="Good morning.", tags={"speaker": "Bo"})
    r = await client.post(
        "/v1/flow",
        json={"state": "get", "params": {"item_id": "Bo", "edges_limit": 5}},
        headers=tenant.headers,
    )
    edges = r.json()["bindings"]["edges"]
    assert edges["count"] == 1 and edges["edges"]["said"][0]["id"] == "line-2"


def _ndjson(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


async def test_export_ndjson_envelope_bundle_and_changes(client, tenant) -> None:
    await _put(client, tenant, id="e1", content="one", tags={"topic": "a"})
    await _put(client, tenant, id="e1", content="one, again")
    await _put(client, tenant, id="e2", content="two", tags={"speaker": "Cy"})
    r = await client.get(
        "/v1/export", params={"include_system": "false", "stream": "ndjson"}, headers=tenant.headers
    )
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
    head, *docs = _ndjson(r.text)
    assert head["format"] == "keep-export" and head["version"] == 3
    info = head["store_info"]
    assert (info["document_count"], info["version_count"], info["part_count"]) == (3, 1, 0)
    by_id = {d["id"]: d for d in docs}
    assert set(by_id) == {"e1", "e2", "Cy"}  # the stub made by the edge tag is a note too
    assert by_id["e1"]["summary"] == "one, again"
    assert [v["summary"] for v in by_id["e1"]["versions"]] == ["one"]
    for key in ("tags", "content_hash", "created_at", "updated_at", "accessed_at", "parts"):
        assert key in by_id["e1"]
    r = await client.get("/v1/export", params={"include_system": "true"}, headers=tenant.headers)
    envelope = r.json()
    assert envelope["store_info"]["document_count"] == len(envelope["documents"]) > 3
    r = await client.get("/v1/export/bundles/Cy", headers=tenant.headers)
    assert r.json()["current_inverse"] == [["said", "e2"]]
    assert r.json()["edge_tag_keys"] == ["speaker"]
    assert (await client.get("/v1/export/bundles/nope", headers=tenant.headers)).status_code == 404
    # the change feed, paged
    r = await client.get(
        "/v1/export/changes", params={"cursor": "0", "limit": 0}, headers=tenant.headers
    )
    first = r.json()
    assert first["events"] == [] and first["cursor"] == first["head_cursor"] != "0"
    seen, cursor = [], "0"
    while True:
        page = (
            await client.get(
                "/v1/export/changes", params={"cursor": cursor, "limit": 2}, headers=tenant.headers
            )
        ).json()
        if not page["events"]:
            break
        seen += [(e["mutation"], e["entity_id"]) for e in page["events"]]
        cursor = page["cursor"]
    assert ("doc_insert", "e1") in seen and ("version_insert", "e1") in seen
    assert cursor == first["head_cursor"]
    bad = await client.get("/v1/export/changes", params={"cursor": "x"}, headers=tenant.headers)
    assert bad.status_code == 400


async def test_change_feed_cursors_are_opaque_and_a_lost_one_restarts(
    client, tenant, other_tenant
) -> None:
    """A cursor is the id of the last change seen (``outbox_id``), never a
    number; text that is no cursor is a 400 in the one error shape; a
    well-formed cursor naming no change of the project (another tenant's,
    or one from before the project was erased and made again) answers
    ``compacted`` with the head as the next cursor, keep's signal to
    rebuild its mirror (§3.5), and reveals nothing else."""
    feed = tenant.project("feed")

    async def changes(cursor: str, headers=feed, limit: int = 1000) -> dict:
        r = await client.get(
            "/v1/export/changes", params={"cursor": cursor, "limit": limit}, headers=headers
        )
        assert r.status_code == 200, r.text
        return r.json()

    for n in (1, 2):
        r = await client.post("/v1/notes", json={"id": f"c{n}", "content": "x"}, headers=feed)
        assert r.status_code == 200
    seen, cursor = [], "0"  # one change a page: each page's cursor is its change's id
    while (page := await changes(cursor, limit=1))["events"]:
        (event,) = page["events"]
        assert page["cursor"] == event["outbox_id"] and not page["compacted"]
        seen.append((event["outbox_id"], event["entity_id"]))
        cursor = page["cursor"]
    assert [n for _, n in seen if not n.startswith(".")] == ["c1", "c2"]
    assert cursor == page["head_cursor"] == seen[-1][0]
    ids = [i for i, _ in seen]
    assert len(set(ids)) == len(ids)
    assert all(isinstance(i, str) and not i.isdigit() and len(i) == 36 for i in ids), ids
    after_c1 = next(i for i, n in seen if n == "c1")
    rest = await changes(after_c1)
    assert [e["entity_id"] for e in rest["events"]] == ["c2"]
    assert rest["cursor"] == rest["head_cursor"] == cursor
    # handed to another tenant: compacted, with only that tenant's own head
    theirs = await changes(cursor, headers=other_tenant.headers)
    assert theirs["compacted"] and theirs["events"] == []
    assert (
        theirs["cursor"]
        == theirs["head_cursor"]
        == (await changes("0", other_tenant.headers, 0))["head_cursor"]
    )
    # the project erased and made again: the old cursor has lost its place
    assert (await client.delete("/v1/projects/feed", headers=tenant.headers)).status_code == 204
    r = await client.post("/v1/notes", json={"id": "c3", "content": "x"}, headers=feed)
    assert r.status_code == 200
    lost = await changes(cursor)
    assert lost["compacted"] and lost["events"] == [] and not lost["truncated"]
    assert lost["cursor"] == lost["head_cursor"] not in ("0", cursor)
    again = [e["entity_id"] for e in (await changes("0"))["events"]]
    assert [i for i in again if not i.startswith(".")] == ["c3"]
    # text that is no cursor
    # a number: a cursor saved before cursors were ids, whose place is lost (a
    # keep mirror registered before the upgrade rebuilds once)
    numeric = await changes("4812")
    assert numeric["compacted"] and numeric["cursor"] == numeric["head_cursor"] == lost["cursor"]
    for bad in ("x", "-1", "99999999999999999999", "1e3", "1.0", "x" * 300, ""):
        r = await client.get("/v1/export/changes", params={"cursor": bad}, headers=feed)
        assert r.status_code == 400, (bad, r.text)
        body = r.json()
        assert body["code"] == "invalid_cursor" and body["request_id"] and "cursor" in body["error"]


async def test_ready_advertises_the_export_capabilities(client) -> None:
    caps = (await client.get("/v1/ready")).json()["capabilities"]
    assert caps["export_bundle"] and caps["export_changes"] and caps["export_stream_ndjson"]


async def test_import_round_trip_into_another_project(client, tenant) -> None:
    await _put(client, tenant, id="r1", content="first words", tags={"topic": "x"})
    await _put(client, tenant, id="r1", content="second words", tags={"topic": "y"})
    await _put(client, tenant, id="r2", content="other note", created_at="2023-05-08T13:56:00")
    exported = (await client.get("/v1/export", headers=tenant.headers)).json()
    payload = {"format": "keep-export", "version": 3, "mode": "merge", **exported}
    r = await client.post("/v1/import", json=payload, headers=tenant.project("copy"))
    assert r.status_code == 200, r.text
    counts = r.json()
    assert counts == {"imported": 2, "versions": 1, "parts": 0, "skipped": 0, "queued": 2}
    again = (await client.post("/v1/import", json=payload, headers=tenant.project("copy"))).json()
    assert again["skipped"] == 2 and again["imported"] == 0
    copy = (await client.get("/v1/export", headers=tenant.project("copy"))).json()

    def shape(doc: dict) -> tuple:
        user = {k: v for k, v in doc["tags"].items() if not k.startswith("_")}
        versions = [(v["summary"], v["tags"].get("topic")) for v in doc["versions"]]
        return doc["summary"], user, versions, doc["created_at"]

    assert {d["id"]: shape(d) for d in copy["documents"]} == {
        d["id"]: shape(d) for d in exported["documents"]
    }
    # replace overwrites; bad input is a 400 that imports nothing
    payload["mode"] = "replace"
    payload["documents"] = [{"id": "r1", "summary": "replaced", "tags": {"k": "v"}}]
    r = await client.post("/v1/import", json=payload, headers=tenant.project("copy"))
    assert r.json()["imported"] == 1
    got = (await client.get("/v1/notes/r1", headers=tenant.project("copy"))).json()
    assert got["summary"] == "replaced" and got["tags"]["k"] == "v"
    bad = {"mode": "merge", "documents": [{"id": "ok", "summary": "s"}, {"id": "bad;id"}]}
    r = await client.post("/v1/import", json=bad, headers=tenant.project("copy"))
    assert r.status_code == 400
    r = await client.get("/v1/notes/ok", headers=tenant.project("copy"))
    assert r.status_code == 404


async def test_imported_parts_and_versions_keep_their_numbers(client, tenant) -> None:
    """Numbers from 1 are kept (each part readable as ID@P{N}), versions go in
    their numbers' order; a bad number refuses the whole import."""
    doc = {
        "id": "numbered",
        "summary": "now",
        "versions": [{"version": 2, "summary": "second"}, {"version": 1, "summary": "first"}],
        "parts": [{"part_num": 3, "summary": "part three"}, {"part_num": 1, "summary": "one"}],
    }
    r = await client.post("/v1/import", json={"documents": [doc]}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    assert r.json()["parts"] == 2 and r.json()["versions"] == 2
    got = await client.get("/v1/notes/numbered@P%7B3%7D", headers=tenant.headers)
    assert got.status_code == 200 and got.json()["summary"] == "part three"
    oldest = await client.get("/v1/notes/numbered@V%7B2%7D", headers=tenant.headers)
    assert oldest.json()["summary"] == "first"
    bad = {**doc, "id": "minus", "parts": [{"part_num": -1, "summary": "p"}]}
    r = await client.post(
        "/v1/import", json={"documents": [{**doc, "id": "kept?"}, bad]}, headers=tenant.headers
    )
    assert r.status_code == 400 and "documents[1].parts[0].part_num" in r.json()["error"]
    for note_id in ("kept%3F", "minus"):
        assert (await client.get(f"/v1/notes/{note_id}", headers=tenant.headers)).status_code == 404


async def test_a_5000_note_import_is_one_request(client, tenant, settings) -> None:
    """keep sends a whole export in one POST: it is not split, so the per-key
    rate limit cannot throttle it, and the body limit is the upload limit."""
    documents = [
        {"id": f"imp-{i:05d}", "summary": f"imported note {i} about tides", "tags": {"batch": "b"}}
        for i in range(5000)
    ]
    r = await client.post(
        "/v1/import",
        json={"format": "keep-export", "version": 3, "mode": "merge", "documents": documents},
        headers=tenant.project("bulk"),
    )
    assert r.status_code == 200, r.text[:300]
    assert r.json()["imported"] == 5000
    listed = await client.get(
        "/v1/notes", params={"tag": "batch=b", "limit": 1}, headers=tenant.project("bulk")
    )
    assert listed.json()["count"] == 1
    head = await client.get(
        "/v1/export", params={"stream": "ndjson"}, headers=tenant.project("bulk")
    )
    assert json.loads(head.text.splitlines()[0])["store_info"]["document_count"] == 5000


async def test_meta_sections_show_open_loops_and_learnings(client, tenant) -> None:
    await _put(client, tenant, id="plan", content="The plan for the release.")
    await _put(client, tenant, id="promise", content="I will send the draft on Friday.",
               tags={"act": "commitment", "status": "open"})  # fmt: skip
    await _put(client, tenant, id="ask", content="Please review the draft.",
               tags={"act": "request", "status": "open"})  # fmt: skip
    await _put(client, tenant, id="done", content="Sent the slides.",
               tags={"act": "commitment", "status": "fulfilled"})  # fmt: skip
    await _put(client, tenant, id="lesson", content="Small drafts get reviewed faster.",
               tags={"kind": "learning"})  # fmt: skip
    r = await client.get("/v1/notes/plan/context", params={"meta_limit": 5}, headers=tenant.headers)
    meta = r.json()["meta"]
    assert sorted(n["id"] for n in meta["todo"]) == ["ask", "promise"]
    assert [n["id"] for n in meta["learnings"]] == ["lesson"]
    assert all(set(n) == {"id", "summary"} for section in meta.values() for n in section)
    r = await client.post(
        "/v1/flow", json={"state": "get", "params": {"item_id": "plan"}}, headers=tenant.headers
    )
    flow_meta = r.json()["bindings"]["meta"]
    assert flow_meta["count"] == 3 and set(flow_meta["sections"]) == {"todo", "learnings"}
