"""Distillation: a memory made from cited passages, with ``derived_from``
provenance edges to them. Written by the agent (``statement``), or rendered
by the memories' model (a local server speaking OpenAI chat completions)
with the project's ``.prompt/distill/*`` doc; a malformed reply stores
nothing; no model and no statement is a 400. Provenance both ways, through
a tag sync, a graph walk and a tag-scoped key; bad input; two tenants."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from app.db import Database
from app.main import create_app
from app.notes import distill_prompts
from app.settings import Settings
from tests.conftest import Tenant
from tests.test_grounding import long_text, parts, path, put, settings, work
from tests.vendors import Vendor, VendorServer

CHAT = "/v1/chat/completions"


@pytest.fixture
async def report(client, tenant, make_pipeline) -> dict[str, Any]:
    """A long note cut into passages in a project that keeps text."""
    await settings(client, tenant, keep_text=True)
    text = long_text()
    await put(client, tenant, id="report", content=text)
    await work(make_pipeline(), client, tenant)
    found = await parts(client, tenant, "report")
    assert len(found) > 5
    return {"text": text, "parts": found}


async def cite(client: httpx.AsyncClient, t: Tenant, **body: Any) -> dict[str, Any]:
    r = await client.post("/v1/citations", json=body, headers=t.headers)
    assert r.status_code == 200, r.text
    return dict(r.json())


async def distill(client: httpx.AsyncClient, t: Tenant, **body: Any) -> httpx.Response:
    return await client.post("/v1/distill", json=body, headers=t.headers)


async def get(client: httpx.AsyncClient, t: Tenant | dict[str, str], url: str) -> Any:
    headers = t.headers if isinstance(t, Tenant) else t
    r = await client.get(url, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


async def memories(client: httpx.AsyncClient, t: Tenant) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = (await get(client, t, "/v1/memories"))["memories"]
    return found


def span(part: dict[str, Any]) -> tuple[int, int]:
    return int(part["tags"]["_span_start"]), int(part["tags"]["_span_end"])


async def test_a_statement_is_stored_with_provenance_to_both_passages(
    client, tenant, report
) -> None:
    text, found = report["text"], report["parts"]
    first, second = (
        await cite(client, tenant, note="report", part=2),
        await cite(client, tenant, note="report", part=5),
    )
    r = await distill(
        client,
        tenant,
        sources=[first["id"], second["id"]],
        statement="The harbour master logs every ship that enters after dusk.",
        subject="harbour",
        tags={"topic": "port"},
    )
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["rendered_by"] == "agent" and out["op"] == "add" and out["prompt"] == "memory"
    memory = out["memory"]
    assert memory["id"].startswith("mem/") and memory["subject"] == "harbour"
    assert memory["tags"]["distilled"] == "memory" and memory["tags"]["topic"] == "port"
    assert sorted(memory["tags"]["citations"]) == sorted([first["id"], second["id"]])
    assert [(p["target"], p["citation"]) for p in out["provenance"]] == [
        ("report@P{2}", first["id"]),
        ("report@P{5}", second["id"]),
    ]
    got = await get(client, tenant, "/v1/memories/" + memory["id"])
    assert got["statement"] == "The harbour master logs every ship that enters after dusk."

    prov = await get(client, tenant, path(memory["id"]) + "/provenance")
    assert [o["target"] for o in prov["provenance"]] == ["report@P{2}", "report@P{5}"]
    for origin, n in zip(prov["provenance"], (2, 5), strict=True):
        start, end = span(found[n - 1])
        assert (origin["note"], origin["part"], origin["exists"]) == ("report", n, True)
        assert (origin["start"], origin["end"]) == (start, end) and origin["summary"]
        (quoted,) = origin["citations"]
        assert quoted["quote"] == text[start:end]

    derived = await get(client, tenant, path("report") + "/derived")
    assert [(d["id"], sorted(d["targets"])) for d in derived["derived"]] == [
        (memory["id"], ["report@P{2}", "report@P{5}"])
    ]
    one = await get(client, tenant, path("report@P{5}") + "/derived")
    assert [(d["id"], d["targets"]) for d in one["derived"]] == [(memory["id"], ["report@P{5}"])]
    assert (await get(client, tenant, path("report@P{3}") + "/derived"))["derived"] == []

    # A tag sync of the memory replaces its tag edges, never its provenance.
    r = await client.patch(
        path(memory["id"]) + "/tags", json={"set": {"topic": "harbour"}}, headers=tenant.headers
    )
    assert r.status_code == 200, r.text
    again = await get(client, tenant, path(memory["id"]) + "/provenance")
    assert [o["target"] for o in again["provenance"]] == ["report@P{2}", "report@P{5}"]
    # The graph walks the provenance edges, to the passages.
    walked = await get(client, tenant, f"/v1/graph/walk?note={memory['id']}&depth=1")
    reached = {(n["id"], n["via"]["predicate"]) for n in walked["reached"]}
    assert {("report@P{2}", "derived_from"), ("report@P{5}", "derived_from")} <= reached


async def test_inline_passages_and_ranges_are_cited_and_said_again_is_one_memory(
    client, tenant, report
) -> None:
    text = report["text"]
    start = text.index("The observatory dome")
    sources = [{"note": "report", "part": 3}, {"note": "report", "start": start, "end": start + 40}]
    body = {"sources": sources, "statement": "The observatory dome turns on forty steel wheels."}
    first = await distill(client, tenant, **body, prompt="facts")
    assert first.status_code == 200, first.text
    prov = first.json()["provenance"]
    assert [p["target"] for p in prov] == ["report@P{3}", "report"]
    assert prov[1]["quote"] == text[start : start + 40] and all(p["citation"] for p in prov)
    listed = await get(client, tenant, "/v1/citations?note=report")
    assert {c["id"] for c in listed["citations"]} == {p["citation"] for p in prov}
    assert first.json()["memory"]["tags"]["distilled"] == "facts"

    # The same memory from another passage: reconciled (no copy), provenance added.
    again = await distill(
        client, tenant, sources=[{"note": "report", "part": 4}], statement=body["statement"]
    )
    assert again.status_code == 200, again.text
    assert again.json()["op"] == "noop"
    memory_id = first.json()["memory"]["id"]
    assert again.json()["memory"]["id"] == memory_id
    assert [m["id"] for m in await memories(client, tenant)] == [memory_id]
    prov = await get(client, tenant, path(memory_id) + "/provenance")
    assert [o["target"] for o in prov["provenance"]] == ["report", "report@P{3}", "report@P{4}"]

    # id restates that memory: a new version of it, from these sources.
    r = await distill(
        client,
        tenant,
        id=memory_id,
        sources=[{"note": "report", "part": 5}],
        statement="The observatory dome turns on a ring of forty steel wheels.",
    )
    assert r.status_code == 200, r.text
    assert (r.json()["op"], r.json()["memory"]["id"]) == ("update", memory_id)
    got = await get(client, tenant, "/v1/memories/" + memory_id)
    assert got["statement"].endswith("a ring of forty steel wheels.") and got["versions"]


async def test_without_kept_text_a_passage_is_its_own_source(client, tenant, make_pipeline) -> None:
    await put(client, tenant, id="plain", content=long_text())
    await work(make_pipeline(), client, tenant)
    (part,) = [p for p in await parts(client, tenant, "plain") if p["id"] == "plain@P{2}"]
    r = await distill(
        client, tenant, sources=[{"note": "plain", "part": 2}], statement="Apples grow north."
    )
    assert r.status_code == 200, r.text
    (source,) = r.json()["provenance"]
    assert source["target"] == "plain@P{2}" and source["citation"] is None
    assert source["quote"] is None and source["summary"] == part["summary"]
    assert "citations" not in r.json()["memory"]["tags"]
    prov = await get(client, tenant, path(r.json()["memory"]["id"]) + "/provenance")
    (origin,) = prov["provenance"]
    assert origin["citations"] == [] and origin["summary"] == part["summary"]
    # a range needs the text: a clear 409, nothing stored
    r = await distill(
        client, tenant, sources=[{"note": "plain", "start": 0, "end": 10}], statement="x y z."
    )
    assert r.status_code == 409 and r.json()["code"] == "text_not_kept"
    assert len(await memories(client, tenant)) == 1


async def test_no_model_and_no_statement_is_a_400(client, tenant, report) -> None:
    r = await distill(client, tenant, sources=[{"note": "report", "part": 1}])
    assert r.status_code == 400, r.text
    assert "statement" in r.json()["error"] and "memory_llm_provider" in r.json()["error"]
    assert await memories(client, tenant) == []
    assert (await get(client, tenant, "/v1/citations"))["citations"] == []


async def test_bad_sources_are_refused_and_nothing_stored(
    client, tenant, other_tenant, report
) -> None:
    theirs_text = long_text(sections=3, needle_at=1)
    await settings(client, other_tenant, keep_text=True)
    await put(client, other_tenant, id="theirs", content=theirs_text)
    theirs = await cite(client, other_tenant, note="theirs", start=0, end=20)
    mine = await cite(client, tenant, note="report", part=1)
    ok = {"note": "report", "part": 2}
    cases: list[tuple[list[Any], dict[str, Any], int, str]] = [
        (["cit_00000000000000000000"], {}, 404, "citation not found"),
        ([theirs["id"]], {}, 404, "citation not found"),
        ([{"note": "theirs", "part": 1}], {}, 404, "not found"),
        ([{"note": "theirs", "start": 0, "end": 5}], {}, 404, "not found"),
        ([ok, {"note": "report", "part": 999}], {}, 404, "part not found"),
        ([{"note": "nope", "part": 1}], {}, 404, "note not found"),
        ([{"note": "report"}], {}, 400, "a source is"),
        ([{"note": "report", "part": 1, "start": 0, "end": 4}], {}, 400, "not both"),
        ([{"note": "report", "start": 0}], {}, 400, "a source is"),
        ([mine["id"]] * 51, {}, 422, "sources"),
        ([], {}, 422, "sources"),
        ([ok], {"prompt": "poems"}, 422, "prompt"),
        ([ok], {"extra": 1}, 422, "extra"),
        ([ok], {"id": "mem/0000000000000000"}, 404, "memory not found"),
        ([ok], {"id": "mem/x", "subject": "s"}, 400, "restates"),
        ([ok], {"statement": " \t "}, 400, "blank"),
        ([{"note": "report", "part": "1"}], {}, 422, "sources"),
    ]
    for given, extra, status, words in cases:
        r = await distill(client, tenant, sources=given, **({"statement": "A b c."} | extra))
        assert r.status_code == status, (given, extra, r.text)
        assert words in r.json()["error"], (given, r.text)
    assert await memories(client, tenant) == []
    listed = await get(client, tenant, "/v1/citations")
    assert [c["id"] for c in listed["citations"]] == [mine["id"]], "no citation made on the way"


async def test_two_tenants_see_only_their_own_provenance(
    client, tenant, other_tenant, report
) -> None:
    r = await distill(client, tenant, sources=[{"note": "report", "part": 2}], statement="A b.")
    memory_id = r.json()["memory"]["id"]
    await put(client, other_tenant, id="report", content="Their own report, short.")
    for url in (path(memory_id) + "/provenance", path(memory_id) + "/derived"):
        r = await client.get(url, headers=other_tenant.headers)
        assert r.status_code == 404, r.text
    assert (await get(client, other_tenant, path("report") + "/derived"))["derived"] == []
    assert (await get(client, tenant, path("report") + "/derived"))["derived"]


async def test_a_tag_scoped_key_sees_no_edge_to_a_document_it_cannot_see(
    client, tenant, report
) -> None:
    r = await distill(
        client,
        tenant,
        sources=[{"note": "report", "part": 2}],
        statement="Section three is about the library.",
        tags={"team": "a"},
    )
    assert r.status_code == 200, r.text
    memory_id = r.json()["memory"]["id"]
    sub = await client.post(
        "/v1/subkeys",
        headers=tenant.headers,
        json={"name": "a", "scopes": ["read"], "tags": {"team": "a"}, "expires_in_seconds": 600},
    )
    assert sub.status_code == 201, sub.text
    team = {"Authorization": f"Bearer {sub.json()['key']}"}
    assert (await get(client, team, path(memory_id)))["id"] == memory_id  # the memory: visible
    assert (await client.get(path("report"), headers=team)).status_code == 404
    assert (await get(client, team, path(memory_id) + "/provenance"))["provenance"] == []
    assert len((await get(client, tenant, path(memory_id) + "/provenance"))["provenance"]) == 1
    walked = await get(client, team, f"/v1/graph/walk?note={memory_id}&depth=2")
    assert not [n for n in walked["reached"] if n["id"].startswith("report")]
    owner = await get(client, tenant, f"/v1/graph/walk?note={memory_id}&depth=1")
    assert "report@P{2}" in {n["id"] for n in owner["reached"]}
    r = await client.post(
        "/v1/distill",
        json={"sources": [{"note": "report", "part": 2}], "statement": "x"},
        headers=team,
    )
    assert r.status_code == 403, r.text


async def test_every_project_holds_the_distill_prompts(client, tenant) -> None:
    fresh = tenant.project("distill-fresh")
    r = await client.get(
        "/v1/notes", params={"prefix": ".prompt/distill/", "include_hidden": "true"}, headers=fresh
    )
    assert r.status_code == 200, r.text
    ids = {n["id"] for n in r.json()["notes"]}
    assert ids == {f".prompt/distill/{name}" for name in distill_prompts.PROMPTS}
    assert set(distill_prompts.PROMPTS) == {
        "facts", "patterns", "insights", "relationships", "entities", "memory"
    }  # fmt: skip
    doc = await get(client, fresh, path(".prompt/distill/facts"))
    assert doc["summary"].startswith("# .prompt/distill/facts") and "## Prompt" in doc["summary"]
    assert doc["tags"]["context"] == "prompt"


# -- a model renders ---------------------------------------------------------------------


def chat_reply(**fields: Any) -> str:
    return json.dumps(fields)


@pytest.fixture
async def with_model(settings: Settings, db: Database) -> AsyncIterator[Any]:
    """The API with the memories' model served locally (OpenAI chat
    completions): yields (client, vendor)."""
    vendor = Vendor(usage=(300, 40))
    with VendorServer(vendor) as server:
        configured = settings.model_copy(
            update={
                "memory_llm_provider": "openai",
                "memory_llm_model": "m-test",
                "memory_llm_base_url": server.url + "/v1",
                "memory_llm_api_key": SecretStr("k"),
            }
        )
        app = create_app(configured, db=db)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://keepmem.test") as c:
                yield c, vendor


def chats(vendor: Vendor) -> list[dict[str, Any]]:
    return [r["body"] for r in vendor.requests if r["path"] == CHAT]


async def test_a_model_renders_the_memory_with_the_projects_prompt(
    with_model, tenant, report
) -> None:
    http, vendor = with_model
    text, found = report["text"], report["parts"]
    vendor.script = [
        chat_reply(statement="The harbour master logs ships after dusk.", kind="event"),
        chat_reply(statement="Ships are logged at the harbour after dusk."),
    ]
    c = await cite(http, tenant, note="report", part=1)
    r = await distill(
        http, tenant, sources=[c["id"], {"note": "report", "part": 6}], prompt="facts"
    )
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["rendered_by"] == "openai:m-test" and out["memory"]["kind"] == "event"
    assert out["memory"]["statement"] == "The harbour master logs ships after dusk."
    (request,) = chats(vendor)
    system, user = (m["content"] for m in request["messages"])
    builtin = distill_prompts.PROMPTS["facts"][2]
    assert system.startswith(builtin) and '"statement"' in system
    for n, part in ((1, found[0]), (2, found[5])):
        start, end = span(part)
        assert f"[{n}] report, passage " in user
        assert " ".join(text[start:end].split()) in user
    spent = await get(http, tenant, "/v1/memories/spend")
    assert (spent["calls"], spent["tokens_in"], spent["tokens_out"]) == (1, 300, 40)

    # The project edits its doc: the next call is sent the edited prompt.
    edited = "# .prompt/distill/facts\n\nOurs.\n\n## Prompt\n\nList the ships only, tersely."
    r = await http.post(
        "/v1/notes",
        json={"id": ".prompt/distill/facts", "content": edited},
        headers=tenant.headers,
    )
    assert r.status_code == 200, r.text
    r = await distill(http, tenant, sources=[c["id"]], prompt="facts", subject="harbour")
    assert r.status_code == 200, r.text
    system = chats(vendor)[1]["messages"][0]["content"]
    assert system.startswith("List the ships only, tersely.") and builtin not in system
    assert "Subject of the memory: harbour" in chats(vendor)[1]["messages"][1]["content"]
    assert r.json()["memory"]["kind"] == "fact"


async def test_a_malformed_reply_is_a_502_and_nothing_is_stored(with_model, tenant, report) -> None:
    http, vendor = with_model
    vendor.script = ["I think the harbour is lovely.", chat_reply(kind="fact")]
    for _ in range(2):
        r = await distill(http, tenant, sources=[{"note": "report", "part": 2}])
        assert r.status_code == 502, r.text
        assert r.json()["code"] == "model_reply_unusable" and "statement" in r.json()["error"]
    assert await memories(http, tenant) == []
    assert (await get(http, tenant, "/v1/citations"))["citations"] == []
    assert (await get(http, tenant, path("report") + "/derived"))["derived"] == []
    spent = await get(http, tenant, "/v1/memories/spend")
    assert spent["calls"] == 2, "an unusable reply's tokens count all the same"
    # a model that cannot be reached: 503, nothing stored either
    vendor.fail_status, vendor.fail_times = 500, -1
    r = await distill(http, tenant, sources=[{"note": "report", "part": 2}])
    assert r.status_code == 503 and r.json()["code"] == "provider_unavailable", r.text
    assert await memories(http, tenant) == []


async def test_a_spent_budget_is_a_429_and_no_call(with_model, tenant, report) -> None:
    http, vendor = with_model
    r = await http.patch(
        "/v1/memories/settings", json={"llm_tokens_per_day": 100}, headers=tenant.headers
    )
    assert r.status_code == 200, r.text
    r = await distill(http, tenant, sources=[{"note": "report", "part": 2}])
    assert r.status_code == 429 and r.json()["code"] == "budget_spent", r.text
    assert "statement" in r.json()["error"] and int(r.headers["Retry-After"]) > 0
    assert chats(vendor) == [] and await memories(http, tenant) == []
    # the agent may still write it itself
    r = await distill(http, tenant, sources=[{"note": "report", "part": 2}], statement="A b c.")
    assert r.status_code == 200 and r.json()["rendered_by"] == "agent"
    assert chats(vendor) == []
