"""Memory formation with the offline rules, through the API: a changed fact
supersedes (kept for include_superseded and as_of), a restatement adds nothing,
more detail is a new version, a retraction deletes nothing, similar names keep
apart, sources are the messages, late imports take their place in time, tenants
see only their own, bad batches store nothing; ``remember`` is reconciled alike."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import httpx
import pytest

from tests.conftest import Tenant
from tests.test_pipeline import path, run_all

T1 = "2024-01-10T09:00:00Z"
MID = "2024-02-01T00:00:00Z"
T2 = "2024-03-01T09:00:00Z"
LATER = "2024-06-01T00:00:00Z"
BEFORE = "2023-12-01T00:00:00Z"


def new_thread() -> str:
    return f"th-{uuid.uuid4().hex[:12]}"


def msg(text: str, at: str | None = None, *, name: str | None = None, role: str = "user") -> dict:
    extra = {"time": at, "name": name}
    return {"role": role, "content": text} | {k: v for k, v in extra.items() if v is not None}


async def say(
    client: httpx.AsyncClient, t: Tenant, thread: str, *messages: dict, **body: Any
) -> dict[str, Any]:
    """POST a batch of messages (user ``alice`` unless told); 202 expected."""
    payload = {"messages": list(messages), "user_id": "alice", **body}
    r = await client.post(f"/v1/threads/{thread}/messages", json=payload, headers=t.headers)
    assert r.status_code == 202, r.text
    out: dict[str, Any] = r.json()
    return out


async def work(pipeline: Any, client: httpx.AsyncClient, t: Tenant) -> None:
    """Run the tenant's jobs as a worker would until none is left."""
    for _ in range(8):
        outcomes = await run_all(pipeline, client, t)
        if not outcomes:
            return
        assert set(outcomes) == {"done"}, outcomes
    raise AssertionError("jobs kept coming")


async def listed(client: httpx.AsyncClient, t: Tenant, **params: Any) -> list[dict[str, Any]]:
    r = await client.get("/v1/memories", params=params, headers=t.headers)
    assert r.status_code == 200, r.text
    found: list[dict[str, Any]] = r.json()["memories"]
    return found


async def detail(client: httpx.AsyncClient, t: Tenant, memory_id: str) -> dict[str, Any]:
    r = await client.get(f"/v1/memories/{memory_id}", headers=t.headers)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


async def found_ids(client: httpx.AsyncClient, t: Tenant, query: str, **body: Any) -> set[str]:
    """Ids of the memory notes full-text find returns for ``query``."""
    payload = {"query": query, "stages": "text", "tags": {"memory": ""}, "limit": 50, **body}
    r = await client.post("/v1/search", json=payload, headers=t.headers)
    assert r.status_code == 200, r.text
    return {n["id"] for n in r.json()["notes"]}


async def extraction_results(client: httpx.AsyncClient, t: Tenant) -> list[dict[str, Any]]:
    """The memory_extract jobs' results, oldest first."""
    r = await client.get("/v1/jobs", params={"kind": "memory_extract"}, headers=t.headers)
    assert r.status_code == 200, r.text
    return [j["result"] for j in reversed(r.json()["jobs"])]


def by_value(memories: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {m["value"]: m for m in memories}


def pairs(memories: list[dict[str, Any]], *keys: str) -> list[tuple[Any, ...]]:
    """``keys`` of each memory, sorted: an order-free picture of a listing."""
    return sorted(tuple(m[k] for k in keys) for m in memories)


async def everything(client: httpx.AsyncClient, t: Tenant, **params: Any) -> list[dict]:
    """Current and superseded memories alike."""
    return await listed(client, t, include_superseded="true", **params)


CHANGES = [
    ("I live in Berlin.", "I moved to Munich.", "lives_in", "Berlin", "Munich", "candidate"),
    ("I work at Acme.", "I work for Globex now.", "works_at", "Acme", "Globex", "candidate"),
    ("Company: Acme", "Company: Globex", "works_at", "Acme", "Globex", "fact"),
    (
        "We renamed the project to Falcon.",
        "We renamed the project to Osprey.",
        "project_name",
        "Falcon",
        "Osprey",
        "candidate",
    ),
]


@pytest.mark.parametrize(("first", "second", "attribute", "old", "new", "certainty"), CHANGES)
async def test_a_changed_fact_leaves_one_current_memory_and_keeps_the_old_one(
    client, tenant, make_pipeline, first, second, attribute, old, new, certainty
) -> None:
    thread, pipeline = new_thread(), make_pipeline()
    await say(client, tenant, thread, msg(first, T1))
    await work(pipeline, client, tenant)
    await say(client, tenant, thread, msg(second, T2))
    await work(pipeline, client, tenant)

    (now,) = await listed(client, tenant, user_id="alice", subject="alice")
    assert (now["attribute"], now["value"], now["current"]) == (attribute, new, True)
    assert now["certainty"] == certainty and now["superseded_by"] is None
    every = by_value(await everything(client, tenant, user_id="alice"))
    assert set(every) == {old, new}
    was = every[old]
    assert (was["current"], was["superseded_by"]) == (False, now["id"])
    assert was["superseded_at"] == "2024-03-01T09:00:00"
    (then,) = await listed(client, tenant, user_id="alice", as_of=MID)
    assert then["id"] == was["id"]
    (later,) = await listed(client, tenant, user_id="alice", as_of=LATER)
    assert later["id"] == now["id"]
    assert await listed(client, tenant, user_id="alice", as_of=BEFORE) == []
    assert [r["supersede"] for r in await extraction_results(client, tenant)] == [0, 1]

    # Find leaves the replaced memory out unless asked, or asked as of before the change.
    assert was["id"] not in await found_ids(client, tenant, old)
    assert was["id"] in await found_ids(client, tenant, old, include_superseded=True)
    assert was["id"] in await found_ids(client, tenant, old, as_of=MID)
    assert now["id"] not in await found_ids(client, tenant, new, as_of=MID)
    assert now["id"] in await found_ids(client, tenant, new)
    # The slot's history, oldest first, is shown with either memory.
    history = (await detail(client, tenant, was["id"]))["history"]
    assert [h["value"] for h in history] == [old, new]


async def test_saying_it_again_adds_nothing_and_the_message_joins_the_sources(
    client, tenant, make_pipeline
) -> None:
    thread, pipeline = new_thread(), make_pipeline()
    first = await say(client, tenant, thread, msg("I live in Berlin.", T1))
    await work(pipeline, client, tenant)
    (before,) = await everything(client, tenant, user_id="alice")
    again = await say(client, tenant, thread, msg("As I said, I live in Berlin.", T2))
    await work(pipeline, client, tenant)

    (after,) = await everything(client, tenant, user_id="alice")
    assert after["id"] == before["id"] and after["current"]
    assert after["sources"] == first["messages"] + again["messages"]
    assert after["statement"] == before["statement"]
    ops = [(r["add"], r["noop"]) for r in await extraction_results(client, tenant)]
    assert ops == [(1, 0), (0, 1)]
    assert len((await detail(client, tenant, after["id"]))["versions"]) == 0


async def test_more_detail_is_a_new_version_of_the_same_memory(
    client, tenant, make_pipeline
) -> None:
    thread, pipeline = new_thread(), make_pipeline()
    await say(client, tenant, thread, msg("Location: Berlin", T1))
    await work(pipeline, client, tenant)
    (first,) = await listed(client, tenant, user_id="alice")
    await say(client, tenant, thread, msg("Location: Berlin, Germany", T2))
    await work(pipeline, client, tenant)

    (now,) = await everything(client, tenant, user_id="alice")
    assert now["id"] == first["id"] and now["current"]
    assert now["value"] == "Berlin, Germany"
    assert now["statement"] == "alice lives in Berlin, Germany"
    assert now["valid_at"] == first["valid_at"] == "2024-01-10T09:00:00"
    got = await detail(client, tenant, now["id"])
    assert [v["statement"] for v in got["versions"]] == ["alice lives in Berlin"]
    await say(client, tenant, thread, msg("Location: Berlin, Germany, Europe", LATER))
    await work(pipeline, client, tenant)
    got = await detail(client, tenant, now["id"])
    assert got["value"] == "Berlin, Germany, Europe" and len(got["history"]) == 1
    wordings = ["alice lives in Berlin, Germany", "alice lives in Berlin"]
    assert [v["statement"] for v in got["versions"]] == wordings  # newest first
    assert [r["update"] for r in await extraction_results(client, tenant)] == [0, 1, 1]


async def test_a_candidate_confirmed_by_a_profile_field_becomes_a_fact(
    client, tenant, make_pipeline
) -> None:
    thread, pipeline = new_thread(), make_pipeline()
    await say(client, tenant, thread, msg("I live in Berlin.", T1))
    await work(pipeline, client, tenant)
    (guess,) = await listed(client, tenant, user_id="alice")
    assert (guess["certainty"], guess["confidence"]) == ("candidate", 0.5)
    context = f"/v1/threads/{thread}/context"
    r = await client.get(context, headers=tenant.headers)
    assert "- alice lives in Berlin (unconfirmed) [since 2024-01-10]" in r.json()["context"]
    await say(client, tenant, thread, msg("Location: Berlin", T2))
    await work(pipeline, client, tenant)

    (now,) = await everything(client, tenant, user_id="alice")
    assert now["id"] == guess["id"]
    assert (now["certainty"], now["confidence"]) == ("fact", 0.9)
    r = await client.get(context, headers=tenant.headers)
    assert "(unconfirmed)" not in r.json()["context"]


async def test_profile_lines_are_facts_each(client, tenant, make_pipeline) -> None:
    profile = msg("Location: Berlin\n- Company: Acme\nJob title: nurse", T1)
    await say(client, tenant, new_thread(), profile)
    await work(make_pipeline(), client, tenant)
    found = pairs(await listed(client, tenant, user_id="alice"), "attribute", "value", "certainty")
    facts = [("job_title", "nurse", "fact"), ("lives_in", "Berlin", "fact")]
    assert found == [*facts, ("works_at", "Acme", "fact")]


async def test_a_heading_line_does_not_swallow_the_field_after_it(
    client, tenant, make_pipeline
) -> None:
    await say(client, tenant, new_thread(), msg("About me:\nLocation: Berlin\nCompany: Acme", T1))
    await work(make_pipeline(), client, tenant)
    found = await listed(client, tenant, user_id="alice")
    assert sorted(m["value"] for m in found) == ["Acme", "Berlin"]


async def test_a_system_prompts_profile_fields_are_the_users(client, tenant, make_pipeline) -> None:
    profile = msg("Location: Berlin\nCompany: Acme", T1, role="system")
    await say(client, tenant, new_thread(), profile)
    await work(make_pipeline(), client, tenant)
    found = await listed(client, tenant, user_id="alice")
    assert pairs(found, "subject", "value") == [("alice", "Acme"), ("alice", "Berlin")]


async def test_a_retraction_supersedes_and_deletes_nothing(client, tenant, make_pipeline) -> None:
    thread, pipeline = new_thread(), make_pipeline()
    await say(client, tenant, thread, msg("I live in Berlin.", T1))
    await work(pipeline, client, tenant)
    (lived,) = await listed(client, tenant, user_id="alice")
    await say(client, tenant, thread, msg("I no longer live in Berlin.", T2))
    await work(pipeline, client, tenant)

    (now,) = await listed(client, tenant, user_id="alice")
    assert (now["negated"], now["value"], now["attribute"]) == (True, "Berlin", "lives_in")
    assert now["statement"] == "alice no longer lives in Berlin"
    old = await detail(client, tenant, lived["id"])
    assert (old["current"], old["superseded_by"]) == (False, now["id"])
    r = await client.get(path(lived["id"]), headers=tenant.headers)
    assert r.status_code == 200, r.text
    assert r.json()["tags"]["superseded_by"] == now["id"]
    (then,) = await listed(client, tenant, user_id="alice", as_of=MID)
    assert then["id"] == lived["id"] and not then["negated"]


async def test_retracting_what_is_not_believed_changes_nothing(
    client, tenant, make_pipeline
) -> None:
    thread, pipeline = new_thread(), make_pipeline()
    await say(client, tenant, thread, msg("I live in Munich.", T1))
    await work(pipeline, client, tenant)
    await say(client, tenant, thread, msg("I no longer live in Berlin.", T2))
    await work(pipeline, client, tenant)

    (only,) = await everything(client, tenant, user_id="alice")
    assert (only["value"], only["current"], only["negated"]) == ("Munich", True, False)


async def test_many_valued_preferences_do_not_conflict(client, tenant, make_pipeline) -> None:
    thread, pipeline = new_thread(), make_pipeline()
    await say(client, tenant, thread, msg("I love jazz.", T1), msg("I like green tea.", T1))
    await work(pipeline, client, tenant)
    assert set(by_value(await listed(client, tenant, user_id="alice"))) == {"jazz", "green tea"}
    await say(client, tenant, thread, msg("I no longer like jazz.", T2))
    await work(pipeline, client, tenant)

    now = await listed(client, tenant, user_id="alice")
    assert sorted((m["value"], m["negated"]) for m in now) == [("green tea", False), ("jazz", True)]
    every = await everything(client, tenant, user_id="alice")
    assert pairs(every, "value", "negated", "current") == [
        ("green tea", False, True),
        ("jazz", False, False),
        ("jazz", True, True),
    ]


@pytest.mark.parametrize(("one", "other"), [("Jon", "John"), ("Caroline", "Carolyn")])
async def test_people_with_similar_names_keep_their_own_memories(
    client, tenant, make_pipeline, one, other
) -> None:
    thread, pipeline = new_thread(), make_pipeline()
    said = [msg("I live in Oslo.", T1, name=one), msg("I live in Boston.", T1, name=other)]
    await say(client, tenant, thread, *said, msg("I work at Acme.", T1, name=other))
    await work(pipeline, client, tenant)
    await say(client, tenant, thread, msg("I moved to Bergen.", T2, name=one))
    await work(pipeline, client, tenant)

    mine = await everything(client, tenant, subject=one)
    assert pairs(mine, "value", "current") == [("Bergen", True), ("Oslo", False)]
    theirs = await everything(client, tenant, subject=other)
    assert pairs(theirs, "value", "current") == [("Acme", True), ("Boston", True)]
    await say(client, tenant, thread, msg("I work for Initech now.", T2, name=other))
    await work(pipeline, client, tenant)
    assert {m["value"] for m in await listed(client, tenant, subject=one)} == {"Bergen"}
    theirs = await listed(client, tenant, subject=other)
    assert pairs(theirs, "value") == [("Boston",), ("Initech",)]


async def test_a_memorys_sources_are_its_messages(client, tenant, make_pipeline) -> None:
    thread = new_thread()
    said = [msg("Good morning!", T1, name="Alice"), msg("How can I help?", T1, role="assistant")]
    sent = await say(
        client, tenant, thread, *said, msg("I moved to Lisbon last month.", T1, name="Alice"),
        agent_id="helper",
    )  # fmt: skip
    assert sent["extraction"] == "queued" and len(sent["messages"]) == 3
    assert sent["messages"][0] == f"thread/{thread}/000000"
    await work(make_pipeline(), client, tenant)

    (m,) = await listed(client, tenant, subject="Alice")
    owners = (m["value"], m["thread_id"], m["user_id"], m["agent_id"])
    assert owners == ("Lisbon", thread, "alice", "helper")
    assert m["sources"] == [sent["messages"][2]]
    got = await detail(client, tenant, m["id"])
    (source,) = got["source_messages"]
    assert source["exists"] and source["id"] == sent["messages"][2]
    assert source["summary"] == "Alice: I moved to Lisbon last month."
    r = await client.get(f"/v1/threads/{thread}/memories", headers=tenant.headers)
    assert [x["id"] for x in r.json()["memories"]] == [m["id"]]
    t = (await client.get(f"/v1/threads/{thread}", headers=tenant.headers)).json()
    assert (t["messages"], t["extracted"], t["waiting"], t["memories_made"]) == (3, 3, 0, 1)
    r = await client.get(f"/v1/threads/{thread}/messages", headers=tenant.headers)
    assert [(x["id"], x["role"], x["speaker"]) for x in r.json()["messages"]] == [
        (sent["messages"][0], "user", "Alice"),
        (sent["messages"][1], "assistant", "helper"),
        (sent["messages"][2], "user", "Alice"),
    ]


async def test_an_old_conversation_imported_late_does_not_override_the_newer(
    client, tenant, make_pipeline
) -> None:
    pipeline = make_pipeline()
    await say(client, tenant, new_thread(), msg("I moved to Munich.", T2))
    await work(pipeline, client, tenant)
    await say(client, tenant, new_thread(), msg("I live in Berlin.", T1))
    await work(pipeline, client, tenant)

    (now,) = await listed(client, tenant, user_id="alice")
    assert now["value"] == "Munich"
    old = by_value(await everything(client, tenant, user_id="alice"))
    assert old["Berlin"]["superseded_by"] == now["id"]
    assert old["Berlin"]["valid_at"] == "2024-01-10T09:00:00"
    (then,) = await listed(client, tenant, user_id="alice", as_of=MID)
    assert then["id"] == old["Berlin"]["id"]
    assert old["Berlin"]["id"] not in await found_ids(client, tenant, "Berlin")


async def test_moving_back_is_a_new_belief_after_the_one_between(
    client, tenant, make_pipeline
) -> None:
    said = (msg("I live in Berlin.", T1), msg("I moved to Munich.", T2))
    await say(client, tenant, new_thread(), *said, msg("I moved to Berlin.", LATER))
    await work(make_pipeline(), client, tenant)
    (now,) = await listed(client, tenant, user_id="alice")
    history = (await detail(client, tenant, now["id"]))["history"]
    assert [(h["value"], h["current"]) for h in history] == [
        ("Berlin", False), ("Munich", False), ("Berlin", True)
    ]  # fmt: skip
    assert history[2]["id"] == now["id"] != history[0]["id"]
    every = await everything(client, tenant, user_id="alice")
    assert [m["id"] for m in every] == [h["id"] for h in reversed(history)]  # newest first
    assert [h["superseded_by"] for h in history] == [history[1]["id"], now["id"], None]
    (then,) = await listed(client, tenant, user_id="alice", as_of=MID)
    assert then["id"] == history[0]["id"]


async def test_a_late_retraction_takes_its_place_in_time(client, tenant, make_pipeline) -> None:
    pipeline = make_pipeline()
    said = (msg("I live in Berlin.", T1), msg("I moved to Munich.", LATER))
    await say(client, tenant, new_thread(), *said)
    await work(pipeline, client, tenant)
    await say(client, tenant, new_thread(), msg("I no longer live in Berlin.", T2))
    await work(pipeline, client, tenant)
    (now,) = await listed(client, tenant, user_id="alice")
    assert (now["value"], now["negated"]) == ("Munich", False)
    history = (await detail(client, tenant, now["id"]))["history"]
    assert [(h["value"], h["negated"]) for h in history] == [
        ("Berlin", False), ("Berlin", True), ("Munich", False)
    ]  # fmt: skip
    assert [h["superseded_by"] for h in history] == [history[1]["id"], now["id"], None]
    (then,) = await listed(client, tenant, user_id="alice", as_of="2024-04-01")
    assert (then["id"], then["negated"]) == (history[1]["id"], True)


async def test_a_thread_id_with_any_allowed_character_works(client, tenant, make_pipeline) -> None:
    thread = f"alice@example.com+chat~{uuid.uuid4().hex[:6]}"
    sent = await say(client, tenant, thread, msg("I live in Berlin.", T1))
    assert sent["messages"][0].startswith("thread/h") and thread not in sent["messages"][0]
    await work(make_pipeline(), client, tenant)
    r = await client.get(f"/v1/threads/{thread}/memories", headers=tenant.headers)
    assert [(m["value"], m["thread_id"]) for m in r.json()["memories"]] == [("Berlin", thread)]
    r = await client.get("/v1/threads", params={"user_id": "alice"}, headers=tenant.headers)
    assert [(t["id"], t["waiting"]) for t in r.json()["threads"]] == [(thread, 0)]


async def test_another_tenant_sees_nothing(client, tenant, other_tenant, make_pipeline) -> None:
    thread = new_thread()
    await say(client, tenant, thread, msg("I live in Berlin.", T1))
    await work(make_pipeline(), client, tenant)
    (m,) = await listed(client, tenant, user_id="alice")

    assert await listed(client, other_tenant) == []
    assert await everything(client, other_tenant, user_id="alice") == []
    for url in (
        f"/v1/threads/{thread}",
        f"/v1/threads/{thread}/messages",
        f"/v1/threads/{thread}/memories",
        f"/v1/memories/{m['id']}",
        path(m["id"]),
    ):
        r = await client.get(url, headers=other_tenant.headers)
        assert r.status_code == 404, (url, r.text)
    assert await found_ids(client, other_tenant, "Berlin", include_superseded=True) == set()
    assert (await client.get("/v1/threads", headers=other_tenant.headers)).json()["threads"] == []
    # Writing to the same thread id makes the other tenant a thread of its own.
    await say(client, other_tenant, thread, msg("Hello.", T1), infer=False)
    r = await client.get(f"/v1/threads/{thread}", headers=tenant.headers)
    assert r.json()["messages"] == 1


BAD_BATCHES = [
    ({"messages": [{"role": "robot", "content": "hi"}]}, 422),
    ({"messages": []}, 422),
    ({"messages": [{"role": "user", "content": f"m{i}"} for i in range(101)]}, 422),
    ({"messages": [{"role": "user", "content": ""}]}, 422),
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "user", "content": "  \n"}]}, 400),
    ({"messages": [{"role": "user", "content": "I live in Rome.", "time": "not a time"}]}, 400),
    ({"messages": [msg("I live in Rome.", T1), msg("I moved to Paris.", "2024-13-45")]}, 400),
    ({"messages": [{"role": "user", "content": "hi", "time": "0001-01-01T00:00:00Z"}]}, 400),
    ({"messages": [{"role": "user", "content": "x" * 100_001}]}, 413),
    ({"messages": [{"role": "user", "content": "hi", "name": "A\nB"}]}, 422),
    ({"messages": [{"role": "user", "content": "hi"}], "infer": "yes"}, 422),
    ({"messages": [{"role": "user", "content": "hi", "colour": "red"}]}, 422),
]


@pytest.mark.parametrize(("body", "status"), BAD_BATCHES)
async def test_a_refused_batch_stores_nothing(client, tenant, make_pipeline, body, status) -> None:
    thread = new_thread()
    r = await client.post(f"/v1/threads/{thread}/messages", json=body, headers=tenant.headers)
    assert r.status_code == status, r.text
    assert r.json()["code"] and r.json()["error"]
    r = await client.get(f"/v1/threads/{thread}", headers=tenant.headers)
    assert r.status_code == 404, r.text
    r = await client.get("/v1/notes", params={"tag": f"thread={thread}"}, headers=tenant.headers)
    assert r.status_code == 200 and r.json()["notes"] == []
    r = await client.get("/v1/jobs", params={"kind": "memory_extract"}, headers=tenant.headers)
    assert r.json()["jobs"] == []


async def test_infer_false_stores_the_messages_and_forms_no_memories(
    client, tenant, make_pipeline
) -> None:
    thread = new_thread()
    sent = await say(client, tenant, thread, msg("I live in Berlin.", T1), infer=False)
    assert sent["extraction"] == "off"
    await work(make_pipeline(), client, tenant)
    assert await everything(client, tenant) == []
    r = await client.get(f"/v1/threads/{thread}", headers=tenant.headers)
    assert (r.json()["messages"], r.json()["waiting"], r.json()["memories_made"]) == (1, 0, 0)
    r = await client.get(path(sent["messages"][0]), headers=tenant.headers)
    assert r.status_code == 200 and r.json()["tags"]["thread"] == thread


async def test_a_bad_as_of_is_a_400(client, tenant) -> None:
    r = await client.get("/v1/memories", params={"as_of": "soon"}, headers=tenant.headers)
    assert r.status_code == 400, r.text
    r = await client.get("/v1/memories/mem/0000000000000000", headers=tenant.headers)
    assert r.status_code == 404, r.text


async def remember(
    client: httpx.AsyncClient, t: Tenant, statement: str, **body: Any
) -> dict[str, Any]:
    """POST /v1/memories; 200 expected."""
    r = await client.post("/v1/memories", json={"statement": statement, **body}, headers=t.headers)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


async def test_remember_said_again_is_a_noop_and_a_new_value_supersedes(client, tenant) -> None:
    home = {"subject": "alice", "attribute": "lives_in", "user_id": "alice"}

    async def lives_in(city: str, at: str) -> dict[str, Any]:
        said = f"Alice lives in {city}."
        return await remember(client, tenant, said, value=city, valid_at=at, **home)

    first = await lives_in("Berlin", T1)
    assert (first["op"], first["superseded"]) == ("add", [])
    again = await lives_in("Berlin", MID)
    assert (again["op"], again["memory"]["id"]) == ("noop", first["memory"]["id"])
    moved = await lives_in("Munich", T2)
    assert moved["op"] == "supersede"
    assert moved["superseded"] == [first["memory"]["id"]]
    (now,) = await listed(client, tenant, user_id="alice")
    assert (now["id"], now["value"], now["certainty"]) == (moved["memory"]["id"], "Munich", "fact")
    assert len(await everything(client, tenant, user_id="alice")) == 2
    assert (await detail(client, tenant, first["memory"]["id"]))["superseded_by"] == now["id"]


async def test_remember_a_statement_the_rules_can_read_finds_its_slot(client, tenant) -> None:
    slot = {"subject": "alice", "attribute": "lives_in", "value": "Berlin"}
    first = await remember(client, tenant, "alice lives in Berlin", **slot)
    again = await remember(client, tenant, "I live in Berlin.", subject="alice")
    assert again["op"] in ("noop", "update")
    assert again["memory"]["id"] == first["memory"]["id"]
    (only,) = await everything(client, tenant, subject="alice")
    assert (only["attribute"], only["value"]) == ("lives_in", "Berlin")
    moved = await remember(client, tenant, "I moved to Munich.", subject="alice")
    assert moved["op"] == "supersede" and moved["memory"]["value"] == "Munich"
    assert moved["superseded"] == [first["memory"]["id"]]


async def test_remember_a_paraphrase_updates_the_memory_it_restates(
    client, tenant, make_pipeline
) -> None:
    shed = "Alice keeps her {} in the {} shed."
    first = await remember(client, tenant, shed.format("bike", "blue"), subject="Alice")
    assert first["memory"]["attribute"] == "states"
    await work(make_pipeline(), client, tenant)  # the memory is embedded: findable by meaning
    again = await remember(client, tenant, shed.format("bicycle", "blue"), subject="Alice")
    assert (again["op"], again["memory"]["id"]) == ("update", first["memory"]["id"])
    (only,) = await everything(client, tenant, subject="Alice")
    assert only["id"] == first["memory"]["id"]
    other = await remember(client, tenant, shed.format("bike", "Berlin"), subject="Alice")
    assert other["op"] == "add"  # another place named: not a restatement


async def test_remember_refuses_an_attribute_without_a_value(client, tenant) -> None:
    r = await client.post(
        "/v1/memories", json={"statement": "x", "attribute": "lives_in"}, headers=tenant.headers
    )
    assert r.status_code == 400, r.text
    assert await everything(client, tenant) == []


async def sse_events(base: str, t: Tenant, want: set[str], timeout: float = 15) -> list[dict]:
    """The project's change events from the first, read from a real server's
    stream until every kind in ``want`` has arrived."""
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    params = {"after": "0", "kind": ",".join(sorted(want))}
    async with (
        httpx.AsyncClient(base_url=base, timeout=timeout) as http,
        http.stream("GET", "/v1/events", params=params, headers=t.headers) as r,
    ):
        assert r.status_code == 200
        lines = r.aiter_lines()
        while want - {e["kind"] for e in got} and time.monotonic() < deadline:
            line = await asyncio.wait_for(anext(lines), max(deadline - time.monotonic(), 0.1))
            if line.startswith("data: "):
                got.append(json.loads(line[6:]))
    return got


async def test_memory_changes_are_events(client, tenant, make_pipeline, live_url) -> None:
    thread, pipeline = new_thread(), make_pipeline()
    await say(client, tenant, thread, msg("I live in Berlin.", T1))
    await work(pipeline, client, tenant)
    await say(client, tenant, thread, msg("I moved to Munich.", T2))
    await work(pipeline, client, tenant)
    every = by_value(await everything(client, tenant, user_id="alice"))
    was, now = every["Berlin"], every["Munich"]

    got = await sse_events(live_url, tenant, {"memory_added", "memory_superseded"})
    added = [e["note_id"] for e in got if e["kind"] == "memory_added"]
    assert added == [was["id"], now["id"]]
    assert [e["note_id"] for e in got if e["kind"] == "memory_superseded"] == [was["id"]]
