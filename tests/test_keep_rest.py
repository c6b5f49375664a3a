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
