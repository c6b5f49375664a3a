"""Progressive disclosure: compact results, timelines, detail, token budgets."""

from __future__ import annotations

import json
from urllib.parse import quote

from tests.test_pipeline import put, run_all


def path(note_id: str) -> str:
    return "/v1/notes/" + quote(note_id, safe="")


async def test_compact_results_are_one_line_and_fit_the_budget(client, tenant) -> None:
    for i in range(12):
        await put(
            client,
            tenant,
            id=f"c{i}",
            content=f"Garden log {i}: watered the tomatoes.\nSecond line {i}.",
        )
    r = await client.post(
        "/v1/search/compact",
        json={"query": "watered tomatoes", "limit": 12},
        headers=tenant.headers,
    )
    body = r.json()
    assert r.status_code == 200 and len(body["results"]) == 12 and not body["truncated"]
    first = body["results"][0]
    assert set(first) == {"id", "score", "summary", "date"}
    assert "\n" not in first["summary"] and "Second line" not in first["summary"]
    r = await client.post(
        "/v1/search/compact",
        json={"query": "watered tomatoes", "limit": 12, "token_budget": 60},
        headers=tenant.headers,
    )
    small = r.json()
    assert small["truncated"] and 0 < len(small["results"]) < 12
    assert small["tokens"] <= 60
    assert small["results"] == body["results"][: len(small["results"])]
    assert sum(len(json.dumps(e)) for e in small["results"]) / 4 <= 60


async def test_timeline_follows_time_within_the_same_tags(client, tenant) -> None:
    for i in range(6):
        await put(
            client,
            tenant,
            id=f"t{i}",
            content=f"Trip day {i}",
            tags={"trip": "japan"},
            created_at=f"2024-03-0{i + 1}T09:00:00",
        )
    await put(
        client,
        tenant,
        id="other",
        content="Unrelated",
        tags={"trip": "peru"},
        created_at="2024-03-03T10:00:00",
    )
    r = await client.get(
        path("t3") + "/timeline", params={"before": 2, "after": 2}, headers=tenant.headers
    )
    body = r.json()
    assert r.status_code == 200 and body["note"]["id"] == "t3"
    assert [e["id"] for e in body["before"]] == ["t1", "t2"]
    assert [e["id"] for e in body["after"]] == ["t4", "t5"]
    assert body["tags"] == ["trip=japan"]
    r = await client.get(
        path("t3") + "/timeline",
        params={"before": 3, "after": 3, "token_budget": 40},
        headers=tenant.headers,
    )
    trimmed = r.json()
    assert trimmed["truncated"]
    kept = [e["id"] for e in trimmed["before"] + trimmed["after"]]
    assert kept and set(kept) <= {"t2", "t4", "t1", "t5"}  # nearest first
    assert (
        await client.get(path("ghost") + "/timeline", headers=tenant.headers)
    ).status_code == 404


async def test_detail_gives_parts_and_history_within_budget(client, tenant, make_pipeline) -> None:
    doc = "\n\n".join(f"# Part {i}\n\n" + f"Details of section {i}. " * 30 for i in range(3))
    await put(client, tenant, id="d", content="first draft")
    await put(client, tenant, id="d", content=doc, analyze=True)
    await run_all(make_pipeline(part_target_chars=700), client, tenant)
    body = (await client.get(path("d") + "/detail", headers=tenant.headers)).json()
    assert body["note"]["id"] == "d" and len(body["parts"]) == 3
    assert body["versions"] == [
        {"id": "d@V{1}", "summary": "first draft", "date": body["versions"][0]["date"]}
    ]
    assert not body["truncated"]
    small = (
        await client.get(
            path("d") + "/detail", params={"token_budget": 120}, headers=tenant.headers
        )
    ).json()
    assert small["truncated"] and len(small["parts"]) + len(small["versions"]) < 4
    r = await client.get(path("d") + "/detail", params={"token_budget": 0}, headers=tenant.headers)
    assert r.status_code == 422


async def test_context_routes_are_tenant_scoped(client, tenant, other_tenant) -> None:
    await put(client, tenant, id="mine", content="private")
    for suffix in ("/timeline", "/detail"):
        r = await client.get(path("mine") + suffix, headers=other_tenant.headers)
        assert r.status_code == 404
        assert (await client.get(path("mine") + suffix)).status_code == 401
