"""POST /v1/notes/batch: many puts in one request and one transaction, each
note stored or refused on its own."""

from __future__ import annotations

from urllib.parse import quote


async def test_batch_stores_each_note_or_says_why(client, tenant) -> None:
    notes = [{"id": f"turn-{i}", "content": f"turn {i} of the talk", "tags": {"talk": "t1"}}
             for i in range(5)]  # fmt: skip
    notes.insert(2, {"id": "bad;id", "content": "refused"})
    notes.append({"content": "   "})
    r = await client.post("/v1/notes/batch", json={"notes": notes}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["stored"] == 5 and body["failed"] == 2
    statuses = [x["status"] for x in body["results"]]
    assert statuses == [200, 200, 400, 200, 200, 200, 400]
    assert body["results"][2]["code"] == "bad_request" and "invalid" in body["results"][2]["error"]
    assert body["results"][0]["note"]["id"] == "turn-0"
    listed = await client.get("/v1/notes", params={"tag": "talk=t1"}, headers=tenant.headers)
    assert listed.json()["count"] == 5
    assert (await client.get("/v1/notes/bad%3Bid", headers=tenant.headers)).status_code in (
        400,
        404,
    )


async def test_batch_limits(client, tenant) -> None:
    r = await client.post("/v1/notes/batch", json={"notes": []}, headers=tenant.headers)
    assert r.status_code == 422
    many = [{"content": f"n{i}"} for i in range(101)]
    r = await client.post("/v1/notes/batch", json={"notes": many}, headers=tenant.headers)
    assert r.status_code == 422


async def _state(client, headers) -> dict:
    """Everything a put leaves behind that a client can see: notes (with
    stubs), their tags and pending work, their versions."""
    listed = await client.get("/v1/notes", params={"limit": 1000}, headers=headers)
    out = {}
    for n in listed.json()["notes"]:
        path = "/v1/notes/" + quote(n["id"], safe="")
        got = (await client.get(path, headers=headers)).json()
        versions = (await client.get(path + "/versions", headers=headers)).json()
        user_tags = {k: v for k, v in got["tags"].items() if not k.startswith("_")}
        out[n["id"]] = (
            got["summary"],
            user_tags,
            sorted(got.get("pending", [])),
            [v["summary"] for v in versions["versions"]],
        )
    return out


async def test_a_batch_leaves_what_the_same_puts_one_by_one_leave(client, tenant) -> None:
    """New notes go in together; notes that exist, repeated ids and refusals
    take the single put's path, in order. The outcome (results and stored
    state) must be the one-by-one outcome."""
    await client.post(
        "/v1/notes", json={"id": "old", "content": "first text"}, headers=tenant.project("one")
    )
    await client.post(
        "/v1/notes", json={"id": "old", "content": "first text"}, headers=tenant.project("many")
    )
    notes = [
        {"id": "a", "content": "alpha", "tags": {"topic": "greek", "speaker": "Ada"}},
        {"id": "old", "content": "second text", "tags": {"topic": "changed"}},
        {"id": "b", "content": "beta", "tags": {"speaker": "a"}},  # an edge to a note here
        {"id": "a", "content": "alpha again"},  # the same id: a new version of "a"
        {"id": "bad;id", "content": "refused"},
        {"id": "c", "content": "gamma", "tags": {"bad key!": "x"}},  # refused tags
        {"content": "no id: the id is the content's hash"},
        {"id": "d", "content": "x" * 3000},  # long: a summary job
        {"id": "u1", "uri": "https://example.com/doc"},  # by URI: a placeholder, a fetch
        {"id": "u1", "content": "typed over the placeholder"},  # after it, as sent
    ]
    one_by_one = []
    for note in notes:
        r = await client.post("/v1/notes", json=note, headers=tenant.project("one"))
        one_by_one.append((r.status_code, r.json().get("id") if r.status_code == 200 else None))
    r = await client.post("/v1/notes/batch", json={"notes": notes}, headers=tenant.project("many"))
    assert r.status_code == 200, r.text
    batched = [(x["status"], x["note"]["id"] if x["note"] else None) for x in r.json()["results"]]
    assert batched == one_by_one
    assert [s for s, _ in batched].count(400) == 2
    assert await _state(client, tenant.project("many")) == await _state(
        client, tenant.project("one")
    )
    versions = await client.get("/v1/notes/a/versions", headers=tenant.project("many"))
    assert [v["summary"] for v in versions.json()["versions"]] == ["alpha"]
    stub = await client.get("/v1/notes/Ada", headers=tenant.project("many"))
    assert stub.status_code == 200 and stub.json()["summary"] == ""


async def test_a_batch_of_new_notes_queues_their_work(client, tenant) -> None:
    notes = [{"id": f"n{i}", "content": f"note number {i}"} for i in range(50)]
    r = await client.post("/v1/notes/batch", json={"notes": notes}, headers=tenant.headers)
    assert r.status_code == 200 and r.json()["stored"] == 50
    assert all("embed" in x["note"]["pending"] for x in r.json()["results"])
    changes = await client.get(
        "/v1/export/changes", params={"cursor": "0", "limit": 500}, headers=tenant.headers
    )
    inserted = [c for c in changes.json()["events"] if c["mutation"] == "doc_insert"]
    assert {c["entity_id"] for c in inserted} >= {f"n{i}" for i in range(50)}
