"""POST /v1/notes/batch: many puts in one request and one transaction, each
note stored or refused on its own."""

from __future__ import annotations


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
