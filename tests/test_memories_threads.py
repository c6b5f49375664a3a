"""Threads and memories beyond formation: deleting a thread, a note read as
of a time, messages paged in order, memories of one second kept in order,
a paraphrase remembered again, tag-scoped keys, spend in /v1/usage and the
context block under its budget."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from tests.conftest import Tenant
from tests.test_memories import T1, T2, listed, msg, new_thread, say, work


async def remember(client: httpx.AsyncClient, t: Tenant, **body: Any) -> dict[str, Any]:
    r = await client.post("/v1/memories", json=body, headers=t.headers)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


async def test_deleting_a_thread_takes_its_messages_and_asked_for_its_memories(
    client, tenant, make_pipeline
) -> None:
    keep, drop = new_thread(), new_thread()
    await say(client, tenant, keep, msg("I work at Initech.", T1))
    sent = await say(client, tenant, drop, msg("I live in Oslo.", T1), msg("Nice.", T1))
    await work(make_pipeline(), client, tenant)
    assert {m["value"] for m in await listed(client, tenant, user_id="alice")} == {
        "Initech",
        "Oslo",
    }
    r = await client.delete(
        f"/v1/threads/{drop}", params={"memories": "true"}, headers=tenant.headers
    )
    assert r.status_code == 200, r.text
    assert r.json() == {"thread_id": drop, "messages": 2, "memories": 1}
    for note_id in sent["messages"]:
        gone = await client.get(f"/v1/notes/{quote(note_id, safe='')}", headers=tenant.headers)
        assert gone.status_code == 404
    assert (await client.get(f"/v1/threads/{drop}", headers=tenant.headers)).status_code == 404
    assert [m["value"] for m in await listed(client, tenant, user_id="alice")] == ["Initech"]
    again = await client.delete(f"/v1/threads/{drop}", headers=tenant.headers)
    assert again.status_code == 404


async def test_a_thread_deleted_without_its_memories_keeps_them(
    client, tenant, make_pipeline
) -> None:
    thread = new_thread()
    await say(client, tenant, thread, msg("I live in Oslo.", T1))
    await work(make_pipeline(), client, tenant)
    r = await client.delete(f"/v1/threads/{thread}", headers=tenant.headers)
    assert r.json()["memories"] == 0
    (kept,) = await listed(client, tenant, user_id="alice")
    assert kept["value"] == "Oslo"
    r = await client.get(f"/v1/memories/{kept['id']}", headers=tenant.headers)
    assert [s["exists"] for s in r.json()["source_messages"]] == [False]


async def test_a_note_as_of_a_time_it_did_not_exist_is_not_found(client, tenant) -> None:
    url = "/v1/notes/plan"
    for content in ("Plan A", "Plan B"):
        r = await client.post(
            "/v1/notes", json={"id": "plan", "content": content}, headers=tenant.headers
        )
        assert r.status_code in (200, 201), r.text
    now = (await client.get(url, params={"as_of": "2999-01-01"}, headers=tenant.headers)).json()
    assert now["summary"] == "Plan B"
    before = await client.get(url, params={"as_of": "2001-01-01"}, headers=tenant.headers)
    assert before.status_code == 404
    bad = await client.get(url, params={"as_of": "yesterday-ish"}, headers=tenant.headers)
    assert bad.status_code == 400 and "as_of" in bad.json()["error"]


async def test_a_note_as_of_before_its_change_reads_the_old_version(client, tenant, db) -> None:
    from sqlalchemy import text

    from app import tenancy

    await client.post(
        "/v1/notes", json={"id": "doc", "content": "Old text"}, headers=tenant.headers
    )
    await client.post(
        "/v1/notes", json={"id": "doc", "content": "New text"}, headers=tenant.headers
    )
    # Age the history: the old version was written in 2020, the new in 2024.
    async with tenancy.tenant_id_transaction(db, tenant.id) as s:
        await s.execute(
            text("UPDATE note_versions SET updated_at = '2020-01-01', created_at = '2020-01-01' "
                 "WHERE note_id = 'doc'")
        )  # fmt: skip
        await s.execute(
            text("UPDATE notes SET updated_at = '2024-01-01', created_at = '2020-01-01' "
                 "WHERE id = 'doc'")
        )  # fmt: skip
    got = await client.get("/v1/notes/doc", params={"as_of": "2022-06-01"}, headers=tenant.headers)
    assert got.json()["summary"] == "Old text"
    got = await client.get("/v1/notes/doc", params={"as_of": "2025-01-01"}, headers=tenant.headers)
    assert got.json()["summary"] == "New text"


async def test_messages_are_paged_oldest_first(client, tenant) -> None:
    thread = new_thread()
    sent = await say(
        client, tenant, thread, *(msg(f"line {i}") for i in range(5)), infer=False
    )  # fmt: skip
    pages, cursor = [], None
    while True:
        params = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        r = await client.get(
            f"/v1/threads/{thread}/messages", params=params, headers=tenant.headers
        )
        assert r.status_code == 200, r.text
        pages.append([m["id"] for m in r.json()["messages"]])
        cursor = r.json()["next_cursor"]
        if not cursor:
            break
    assert pages[0] == sent["messages"][:2]
    assert [i for page in pages for i in page] == sent["messages"]


async def test_memories_of_one_second_keep_their_order(client, tenant) -> None:
    first = await remember(
        client, tenant, statement="Bo lives in Oslo.", subject="Bo", attribute="lives_in",
        value="Oslo",
    )  # fmt: skip
    second = await remember(
        client, tenant, statement="Bo lives in Bergen.", subject="Bo", attribute="lives_in",
        value="Bergen",
    )  # fmt: skip
    third = await remember(
        client, tenant, statement="Bo lives in Tromso.", subject="Bo", attribute="lives_in",
        value="Tromso",
    )  # fmt: skip
    assert [first["op"], second["op"], third["op"]] == ["add", "supersede", "supersede"]
    (current,) = await listed(client, tenant, subject="Bo")
    assert current["value"] == "Tromso"
    r = await client.get(f"/v1/memories/{current['id']}", headers=tenant.headers)
    history = r.json()["history"]
    assert [m["value"] for m in history] == ["Oslo", "Bergen", "Tromso"]
    assert [m["superseded_by"] for m in history] == [
        second["memory"]["id"],
        third["memory"]["id"],
        None,
    ]


async def test_a_paraphrase_remembered_again_updates_the_memory(
    client, tenant, make_pipeline
) -> None:
    said = "Alice keeps her bicycle in the garage on Elm Street."
    first = await remember(client, tenant, statement=said, subject="Alice")
    await work(make_pipeline(), client, tenant)  # embedded: findable by meaning
    again = await remember(
        client,
        tenant,
        statement="Alice keeps her bike in the garage on Elm Street.",
        subject="Alice",
    )
    assert again["op"] == "update" and again["memory"]["id"] == first["memory"]["id"]
    other = await remember(
        client, tenant, statement="Alice keeps her bicycle in the garage on Oak Street.",
        subject="Alice",
    )  # fmt: skip
    assert other["op"] == "add"  # another street: another fact, however close the words
    assert len(await listed(client, tenant, subject="Alice")) == 2


async def test_a_tag_scoped_key_cannot_use_threads_or_memories(client, tenant) -> None:
    r = await client.post(
        "/v1/subkeys",
        headers=tenant.headers,
        json={"name": "narrow", "tags": {"user": "alice"}, "expires_in_seconds": 600},
    )
    assert r.status_code == 201, r.text
    narrow = {"Authorization": f"Bearer {r.json()['key']}"}
    refused = [
        await client.get("/v1/memories", headers=narrow),
        await client.post(
            f"/v1/threads/{new_thread()}/messages", json={"messages": [msg("hi")]}, headers=narrow
        ),
    ]
    for r in refused:
        assert r.status_code == 403, r.text
        assert "tag scope" in r.json()["error"]


async def test_usage_and_spend_show_memory_extraction(client, tenant) -> None:
    usage = (await client.get("/v1/usage", headers=tenant.headers)).json()
    assert usage["memory_tokens_today"] == {"calls": 0, "tokens_in": 0, "tokens_out": 0}
    spend = (await client.get("/v1/memories/spend", headers=tenant.headers)).json()
    assert spend["calls"] == 0 and spend["budget"] > 0
    r = await client.patch(
        "/v1/memories/settings", json={"llm_tokens_per_day": 1000}, headers=tenant.headers
    )
    assert r.json()["llm_tokens_per_day"] == 1000
    bad = await client.patch(
        "/v1/memories/settings", json={"llm_tokens_per_day": "1000"}, headers=tenant.headers
    )
    assert bad.status_code == 422


async def test_the_context_block_keeps_to_its_budget(client, tenant, make_pipeline) -> None:
    thread = new_thread()
    await say(
        client, tenant, thread,
        msg("I live in Lisbon.", T1), msg("I work at Initech.", T1), msg("I love surfing.", T2),
        *(msg(f"Some long chatter about the weather number {i} " * 5, T2) for i in range(10)),
    )  # fmt: skip
    await work(make_pipeline(), client, tenant)
    small = await client.get(
        f"/v1/threads/{thread}/context", params={"token_budget": 60}, headers=tenant.headers
    )
    body = small.json()
    assert small.status_code == 200 and body["truncated"] is True
    assert body["tokens"] <= 60 and len(body["context"]) <= 60 * 4
    big = (
        await client.get(
            f"/v1/threads/{thread}/context",
            params={"query": "where does she live", "token_budget": 4000},
            headers=tenant.headers,
        )
    ).json()
    assert big["memories"][0]["value"] == "Lisbon"
    assert "(unconfirmed)" in big["context"]  # the rules' phrase matches are candidates
    assert {m["value"] for m in big["memories"]} >= {"Lisbon", "Initech", "surfing"}


async def test_a_thread_keeps_its_user(client, tenant) -> None:
    thread = new_thread()
    await say(client, tenant, thread, msg("hello"), infer=False)
    r = await client.post(
        f"/v1/threads/{thread}/messages",
        json={"messages": [msg("I live in Oslo.")], "user_id": "bob"},
        headers=tenant.headers,
    )
    assert r.status_code == 409 and "alice" in r.json()["error"]
    t = (await client.get(f"/v1/threads/{thread}", headers=tenant.headers)).json()
    assert (t["user_id"], t["messages"]) == ("alice", 1)  # nothing of the refused batch
    same = await say(client, tenant, thread, msg("again"), infer=False)  # alice, as before
    assert same["messages"] == [f"thread/{thread}/000001"]
