"""Memory formation with a hosted model, end to end through the API and the
worker, against a local server speaking the OpenAI and Anthropic wire
formats with scripted replies: a change replaces what the model was shown,
a "delete" only supersedes, wrong numbers are ignored, a reply that is not
the JSON asked for retries and dead-letters with the inbox intact and
nothing written, the day's token budget sends batches to the rules, and
the spend counts what the calls cost."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from app.providers import extraction_llm
from app.providers.extraction import Extractor
from tests.conftest import Tenant
from tests.test_memories import (
    MID,
    T1,
    T2,
    by_value,
    detail,
    found_ids,
    listed,
    msg,
    new_thread,
    say,
    work,
)
from tests.test_pipeline import path, run_all
from tests.vendors import Vendor, VendorServer

VENDORS = pytest.mark.parametrize("provider", ["openai", "anthropic"])
CHAT = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}


def item(**fields: Any) -> dict[str, Any]:
    """A well-formed memory of a reply (alice lives in Berlin, from message
    1), with ``fields`` changed."""
    base: dict[str, Any] = {
        "kind": "fact",
        "subject": "alice",
        "attribute": "lives_in",
        "value": "Berlin",
        "statement": "Alice lives in Berlin.",
        "confidence": 0.9,
        "single": True,
        "negated": False,
        "valid_at": None,
        "sources": [1],
        "replaces": None,
    }
    return {**base, **fields}


def reply(*items: dict[str, Any]) -> str:
    return json.dumps({"memories": list(items)})


@asynccontextmanager
async def model(
    make_pipeline: Any, vendor: Vendor, provider: str = "openai", **overrides: Any
) -> AsyncIterator[tuple[Any, VendorServer]]:
    """A pipeline whose memories' extractor is a model served locally."""
    with VendorServer(vendor) as server:
        base = server.url + ("/v1" if provider == "openai" else "")
        extractor: Extractor | None = extraction_llm.create(
            provider, model="m-test", base_url=base, api_key="k"
        )
        assert extractor is not None
        pipeline = make_pipeline(**overrides)
        pipeline.extractor = extractor
        try:
            yield pipeline, server
        finally:
            await extractor.aclose()


def chats(server: VendorServer, provider: str = "openai") -> list[dict[str, Any]]:
    return [r for r in server.vendor.requests if r["path"] == CHAT[provider]]


def shown(request: dict[str, Any]) -> str:
    """The text the model was given (the user turn) in a recorded request."""
    turns = request["body"]["messages"]
    text: str = turns[-1]["content"]
    return text


async def spend(client: httpx.AsyncClient, t: Tenant) -> dict[str, Any]:
    r = await client.get("/v1/memories/spend", headers=t.headers)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


async def thread_of(client: httpx.AsyncClient, t: Tenant, thread: str) -> dict[str, Any]:
    r = await client.get(f"/v1/threads/{thread}", headers=t.headers)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


async def extract_jobs(client: httpx.AsyncClient, t: Tenant, **params: Any) -> list[dict]:
    r = await client.get("/v1/jobs", params={"kind": "memory_extract", **params}, headers=t.headers)
    assert r.status_code == 200, r.text
    jobs: list[dict[str, Any]] = r.json()["jobs"]
    return jobs


MOVED = item(value="Munich", statement="Alice moved to Munich.", sources=[1], replaces=1)


@VENDORS
async def test_a_move_the_model_reports_supersedes_the_memory_it_was_shown(
    client, tenant, make_pipeline, provider
) -> None:
    thread = new_thread()
    vendor = Vendor(script=[reply(item()), reply(MOVED)], usage=(400, 60))
    async with model(make_pipeline, vendor, provider) as (pipeline, server):
        await say(client, tenant, thread, msg("I live in Berlin.", T1))
        await work(pipeline, client, tenant)
        await say(client, tenant, thread, msg("I've just moved to Munich!", T2))
        await work(pipeline, client, tenant)
        first, second = chats(server, provider)
    assert "alice (user): I live in Berlin." in shown(first)
    assert "(1) alice | lives_in | Berlin | Alice lives in Berlin." in shown(second)

    (now,) = await listed(client, tenant, user_id="alice")
    assert (now["value"], now["certainty"], now["confidence"]) == ("Munich", "fact", 0.9)
    assert now["valid_at"] == "2024-03-01T09:00:00"
    every = by_value(await listed(client, tenant, user_id="alice", include_superseded="true"))
    assert set(every) == {"Berlin", "Munich"}
    assert every["Berlin"]["superseded_by"] == now["id"]
    assert [m["value"] for m in await listed(client, tenant, user_id="alice", as_of=MID)] == [
        "Berlin"
    ]
    assert every["Berlin"]["id"] not in await found_ids(client, tenant, "Berlin")
    assert every["Berlin"]["id"] in await found_ids(client, tenant, "Berlin", as_of=MID)
    today = await spend(client, tenant)
    assert (today["calls"], today["tokens_in"], today["tokens_out"]) == (2, 800, 120)
    assert today["refused"] == 0


async def test_a_restatement_the_model_reports_adds_nothing(client, tenant, make_pipeline) -> None:
    thread = new_thread()
    again = item(statement="Alice still lives in Berlin.", replaces=1)
    vendor = Vendor(script=[reply(item()), reply(again)])
    async with model(make_pipeline, vendor) as (pipeline, _server):
        one = await say(client, tenant, thread, msg("I live in Berlin.", T1))
        await work(pipeline, client, tenant)
        two = await say(client, tenant, thread, msg("Still in Berlin, yes.", T2))
        await work(pipeline, client, tenant)
    (m,) = await listed(client, tenant, user_id="alice", include_superseded="true")
    assert m["current"] and m["sources"] == one["messages"] + two["messages"]
    results = [j["result"] for j in reversed(await extract_jobs(client, tenant))]
    assert [(r["mode"], r["add"], r["noop"]) for r in results] == [
        ("openai:m-test", 1, 0),
        ("openai:m-test", 0, 1),
    ]


async def test_a_refinement_the_model_reports_is_a_new_version(
    client, tenant, make_pipeline
) -> None:
    thread = new_thread()
    more = item(value="Berlin, Germany", statement="Alice lives in Berlin, Germany.", replaces=1)
    vendor = Vendor(script=[reply(item()), reply(more)])
    async with model(make_pipeline, vendor) as (pipeline, _server):
        await say(client, tenant, thread, msg("I live in Berlin.", T1))
        await work(pipeline, client, tenant)
        await say(client, tenant, thread, msg("Berlin in Germany, I mean.", T2))
        await work(pipeline, client, tenant)
    (m,) = await listed(client, tenant, user_id="alice", include_superseded="true")
    assert (m["value"], m["statement"]) == ("Berlin, Germany", "Alice lives in Berlin, Germany.")
    got = await detail(client, tenant, m["id"])
    assert [v["statement"] for v in got["versions"]] == ["Alice lives in Berlin."]


FORGET = {
    "delete-op": {"op": "delete", "replaces": 1, "sources": [1]},
    "negated": item(statement="Alice no longer lives in Berlin.", negated=True, replaces=1),
    "negated-without-statement": {**item(negated=True, replaces=1), "statement": None},
}


async def forgotten(client, tenant, make_pipeline, forget: dict[str, Any]) -> tuple[str, dict]:
    """Berlin remembered, then a model's retraction of it: the thread and
    the old memory."""
    thread = new_thread()
    vendor = Vendor(script=[reply(item()), reply(forget)])
    async with model(make_pipeline, vendor) as (pipeline, _server):
        await say(client, tenant, thread, msg("I live in Berlin.", T1))
        await work(pipeline, client, tenant)
        (lived,) = await listed(client, tenant, user_id="alice")
        await say(client, tenant, thread, msg("Forget where I live, please.", T2))
        await work(pipeline, client, tenant)
    return thread, lived


@pytest.mark.parametrize("forget", FORGET.values(), ids=FORGET.keys())
async def test_a_model_asking_to_delete_only_supersedes(
    client, tenant, make_pipeline, forget
) -> None:
    _thread, lived = await forgotten(client, tenant, make_pipeline, forget)
    (now,) = await listed(client, tenant, user_id="alice")
    assert (now["negated"], now["attribute"], now["value"]) == (True, "lives_in", "Berlin")
    assert now["id"] != lived["id"]
    r = await client.get(path(lived["id"]), headers=tenant.headers)
    assert r.status_code == 200, r.text
    assert r.json()["tags"]["superseded_by"] == now["id"]
    assert r.json()["summary"] == "Alice lives in Berlin."
    assert (await detail(client, tenant, lived["id"]))["current"] is False
    assert len(await listed(client, tenant, user_id="alice", include_superseded="true")) == 2
    assert [m["id"] for m in await listed(client, tenant, user_id="alice", as_of=MID)] == [
        lived["id"]
    ]


NEGATION = re.compile(r"\bno longer\b|\bnot\b|\bnever\b|n't\b")


@pytest.mark.parametrize(
    "name",
    [
        "delete-op",
        "negated",
        "negated-without-statement",
    ],
)
async def test_a_retraction_never_reads_as_the_fact_it_retracts(
    client, tenant, make_pipeline, name
) -> None:
    thread, _lived = await forgotten(client, tenant, make_pipeline, FORGET[name])
    (now,) = await listed(client, tenant, user_id="alice")
    assert now["negated"] and NEGATION.search(now["statement"].casefold()), now["statement"]
    r = await client.get(f"/v1/threads/{thread}/context", headers=tenant.headers)
    assert r.status_code == 200, r.text
    known = r.json()["context"].split("## Relevant messages")[0]
    said = [line for line in known.splitlines() if "berlin" in line.casefold()]
    assert said and all(NEGATION.search(line.casefold()) for line in said), said


async def test_wrong_numbers_in_a_reply_are_ignored_without_failing(
    client, tenant, make_pipeline
) -> None:
    thread = new_thread()
    wrong = reply(
        item(sources=[1, 42], replaces=99),
        item(value="Paris", statement="Alice lives in Paris.", sources=[0, 42]),
        item(attribute="likes", value="jazz", single=False, sources=[True]),
    )
    async with model(make_pipeline, Vendor(script=[wrong])) as (pipeline, _server):
        sent = await say(client, tenant, thread, msg("I live in Berlin.", T1))
        await work(pipeline, client, tenant)
    (m,) = await listed(client, tenant, user_id="alice", include_superseded="true")
    assert (m["value"], m["sources"]) == ("Berlin", sent["messages"])
    (job,) = await extract_jobs(client, tenant)
    assert job["status"] == "done" and job["attempts"] == 1
    assert (job["result"]["read"], job["result"]["add"], job["result"]["dropped"]) == (1, 1, 4)
    assert (await thread_of(client, tenant, thread))["waiting"] == 0


async def test_a_replace_naming_another_person_is_ignored(client, tenant, make_pipeline) -> None:
    thread = new_thread()
    first = reply(
        item(subject="Jon", value="Oslo", statement="Jon lives in Oslo.", sources=[1]),
        item(subject="John", value="Boston", statement="John lives in Boston.", sources=[2]),
    )
    # The model names Jon's memory as the one John's move replaces: a slip.
    moved = item(subject="John", value="Bergen", statement="John moved to Bergen.", sources=[2])
    vendor = Vendor(script=[first, reply({**moved, "replaces": 1})])
    async with model(make_pipeline, vendor) as (pipeline, server):
        await say(
            client,
            tenant,
            thread,
            msg("I live in Oslo.", T1, name="Jon"),
            msg("I live in Boston.", T1, name="John"),
        )
        await work(pipeline, client, tenant)
        await say(
            client,
            tenant,
            thread,
            msg("Hi again.", T2, name="Jon"),
            msg("I moved to Bergen.", T2, name="John"),
        )
        await work(pipeline, client, tenant)
        second = shown(chats(server)[1])
    assert "Jon | lives_in | Oslo" in second and "John | lives_in | Boston" in second
    assert [m["value"] for m in await listed(client, tenant, subject="Jon")] == ["Oslo"]
    johns = await listed(client, tenant, subject="John", include_superseded="true")
    assert sorted((m["value"], m["current"]) for m in johns) == [
        ("Bergen", True),
        ("Boston", False),
    ]


async def test_a_stated_earlier_time_does_not_override_what_is_newer(
    client, tenant, make_pipeline
) -> None:
    thread = new_thread()
    munich = item(value="Munich", statement="Alice lives in Munich.")
    berlin = item(statement="Alice lived in Berlin in 2023.", valid_at="2023-05-01")
    vendor = Vendor(script=[reply(munich), reply(berlin)])
    async with model(make_pipeline, vendor) as (pipeline, _server):
        await say(client, tenant, thread, msg("I live in Munich.", T1))
        await work(pipeline, client, tenant)
        await say(client, tenant, thread, msg("In May 2023 I lived in Berlin.", T2))
        await work(pipeline, client, tenant)
    (now,) = await listed(client, tenant, user_id="alice")
    assert now["value"] == "Munich"
    old = by_value(await listed(client, tenant, user_id="alice", include_superseded="true"))
    assert old["Berlin"]["valid_at"] == "2023-05-01T00:00:00"
    assert old["Berlin"]["superseded_by"] == now["id"]
    assert [
        m["value"] for m in await listed(client, tenant, user_id="alice", as_of="2023-12-01")
    ] == ["Berlin"]


async def test_batches_that_arrive_before_the_job_runs_share_one_call(
    client, tenant, make_pipeline
) -> None:
    thread = new_thread()
    both = reply(
        item(sources=[1]), item(attribute="likes", value="jazz", single=False, sources=[2])
    )
    async with model(make_pipeline, Vendor(script=[both])) as (pipeline, server):
        first = await say(client, tenant, thread, msg("I live in Berlin.", T1))
        second = await say(client, tenant, thread, msg("And I love jazz.", T1))
        assert (first["extraction"], second["extraction"]) == ("queued", "joined")
        await work(pipeline, client, tenant)
        (call,) = chats(server)
    assert "[1] " in shown(call) and "[2] " in shown(call)
    got = {m["value"]: m["sources"] for m in await listed(client, tenant, user_id="alice")}
    assert got == {"Berlin": first["messages"], "jazz": second["messages"]}


@pytest.mark.parametrize(
    "garbled",
    [
        "I'm sorry, I can't help with that.",
        '{"memories": [' + json.dumps(item()) + ', {"kind": "fact", "subject": ',
        '{"memory": []}',
    ],
    ids=["prose", "cut-off", "wrong-key"],
)
async def test_a_malformed_reply_retries_then_dead_letters_with_nothing_written(
    client, tenant, make_pipeline, garbled
) -> None:
    thread = new_thread()
    vendor = Vendor(summary=garbled)
    settings = {"job_backoff_base_seconds": 0, "job_max_attempts": 2}
    async with model(make_pipeline, vendor, **settings) as (pipeline, server):
        await say(client, tenant, thread, msg("I live in Berlin.", T1), msg("Hi.", T1))
        job_note = f"thread/{thread}"
        assert await run_all(pipeline, client, tenant, job_note) == ["retry"]
        (job,) = await extract_jobs(client, tenant)
        assert (job["status"], job["attempts"]) == ("pending", 1)
        assert "MalformedReply" in job["last_error"]
        waiting = await thread_of(client, tenant, thread)
        assert (waiting["waiting"], waiting["extracted"]) == (2, 0)
        assert await listed(client, tenant, include_superseded="true") == []
        assert await run_all(pipeline, client, tenant, job_note) == ["dead"]
        assert len(chats(server)) == 2
    (job,) = await extract_jobs(client, tenant, status="dead")
    assert job["dead_lettered_at"] is not None
    after = await thread_of(client, tenant, thread)
    assert (after["waiting"], after["extracted"], after["memories_made"]) == (2, 0, 0)
    assert await listed(client, tenant, include_superseded="true") == []

    # The inbox was kept: the next batch's job reads it all.
    vendor = Vendor(script=[reply(item())])
    async with model(make_pipeline, vendor) as (pipeline, server):
        later = await say(client, tenant, thread, msg("Bye!", T2))
        assert later["extraction"] == "queued"
        await work(pipeline, client, tenant)
        assert "I live in Berlin." in shown(chats(server)[0])
    (m,) = await listed(client, tenant, user_id="alice")
    assert m["value"] == "Berlin"
    assert (await thread_of(client, tenant, thread))["waiting"] == 0


async def test_a_spent_budget_sends_the_batch_to_the_rules(client, tenant, make_pipeline) -> None:
    r = await client.patch(
        "/v1/memories/settings", json={"llm_tokens_per_day": 0}, headers=tenant.headers
    )
    assert r.status_code == 200 and r.json()["llm_tokens_per_day"] == 0, r.text
    thread = new_thread()
    async with model(make_pipeline, Vendor(script=[reply(item())])) as (pipeline, server):
        await say(client, tenant, thread, msg("I live in Berlin.", T1))
        await work(pipeline, client, tenant)
        assert chats(server) == []
    (m,) = await listed(client, tenant, user_id="alice")
    assert (m["value"], m["certainty"]) == ("Berlin", "candidate")
    today = await spend(client, tenant)
    assert (today["calls"], today["tokens_in"], today["refused"], today["budget"]) == (0, 0, 1, 0)
    (job,) = await extract_jobs(client, tenant)
    assert (job["result"]["mode"], job["result"]["budget_spent"]) == ("rules", True)


async def test_a_call_that_might_pass_the_budget_is_not_made(client, tenant, make_pipeline) -> None:
    r = await client.patch(
        "/v1/memories/settings", json={"llm_tokens_per_day": 4000}, headers=tenant.headers
    )
    assert r.status_code == 200, r.text
    thread = new_thread()
    vendor = Vendor(script=[reply(item()), reply(MOVED)], usage=(2500, 100))
    async with model(make_pipeline, vendor) as (pipeline, server):
        await say(client, tenant, thread, msg("I live in Berlin.", T1))
        await work(pipeline, client, tenant)
        await say(client, tenant, thread, msg("I moved to Munich.", T2))
        await work(pipeline, client, tenant)
        assert len(chats(server)) == 1
    today = await spend(client, tenant)
    assert (today["calls"], today["tokens_in"], today["tokens_out"]) == (1, 2500, 100)
    assert (today["refused"], today["budget"]) == (1, 4000)
    # The rules read the second batch: the move is still recorded.
    (now,) = await listed(client, tenant, user_id="alice")
    assert (now["value"], now["certainty"]) == ("Munich", "candidate")


async def test_a_budget_above_the_servers_is_capped_and_another_tenant_is_apart(
    client, tenant, other_tenant, settings
) -> None:
    r = await client.patch(
        "/v1/memories/settings", json={"llm_tokens_per_day": 10**9}, headers=tenant.headers
    )
    assert r.json()["llm_tokens_per_day"] == settings.memory_llm_tokens_per_day
    r = await client.patch(
        "/v1/memories/settings", json={"llm_tokens_per_day": -1}, headers=tenant.headers
    )
    assert r.status_code == 422, r.text
    await client.patch(
        "/v1/memories/settings", json={"llm_tokens_per_day": 0}, headers=tenant.headers
    )
    r = await client.get("/v1/memories/settings", headers=other_tenant.headers)
    assert r.json()["llm_tokens_per_day"] == settings.memory_llm_tokens_per_day
    assert (await spend(client, other_tenant))["refused"] == 0
