"""keep's state-doc language run by keepmem: the named flows keep ships
(seeded into every project), budgets that stop with a cursor and cursors
that resume, a project's own flows and fragments, meta docs, prompts."""

from __future__ import annotations

from typing import Any

import pytest

from app import tenancy
from app.accounts import service as accounts
from app.flows import statedoc
from app.flows.runtime import Cursor, decode_cursor, encode_cursor
from tests.test_pipeline import run_all

NOTES = {
    "pasta": "Carbonara needs eggs, pecorino, guanciale and black pepper.",
    "bread": "Sourdough bread rises slowly overnight with a starter.",
    "rust": "The borrow checker in Rust enforces ownership of memory.",
    "harbour": "The harbour ferry leaves at nine every morning.",
}


async def _flow(client, tenant, state: str, params: dict[str, Any], **extra: Any) -> dict:
    body = {"state": state, "params": params, **extra}
    r = await client.post("/v1/flow", json=body, headers=tenant.headers)
    assert r.status_code == 200, r.text
    return r.json()


async def _put(client, tenant, note_id: str, content: str, **tags: Any) -> None:
    body = {"id": note_id, "content": content, "tags": tags}
    r = await client.post("/v1/notes", json=body, headers=tenant.headers)
    assert r.status_code == 200, r.text


@pytest.fixture
async def stocked(client, tenant, make_pipeline):
    for note_id, content in NOTES.items():
        await _put(
            client, tenant, note_id, content, topic="food" if note_id in "pasta bread" else "x"
        )
    await run_all(make_pipeline(), client, tenant)
    return tenant


# -- the language --------------------------------------------------------------------------


def test_a_doc_that_cannot_run_is_refused_with_where() -> None:
    with pytest.raises(statedoc.StateDocError, match="match must be"):
        statedoc.parse("x", "match: maybe\nrules: []")
    with pytest.raises(statedoc.StateDocError, match="does not compile"):
        statedoc.parse("x", "match: all\nrules:\n  - when: 'a ==='\n    do: find")
    with pytest.raises(statedoc.StateDocError, match="not YAML"):
        statedoc.parse("x", "match: [")
    laughs = "a: &a [x, x, x, x]\nb: &b [*a, *a, *a, *a]\nmatch: all\nrules: [*b, *b]"
    with pytest.raises(statedoc.StateDocError, match="aliases"):
        statedoc.parse("x", laughs)
    with pytest.raises(statedoc.StateDocError, match="nested too deeply"):
        statedoc.parse("x", "[" * 20_000 + "]" * 20_000)
    with pytest.raises(statedoc.StateDocError, match="nested too deeply"):
        statedoc.parse("x", "match: all\nrules:\n" + " " * 400 + "- id: x\n")


def test_templates_keep_types_and_interpolate() -> None:
    ctx = {"params": {"limit": 5, "q": "boats"}, "search": {"results": [{"id": "a"}]}}
    assert statedoc.resolve("{params.limit}", ctx) == 5
    assert statedoc.resolve("about {params.q}!", ctx) == "about boats!"
    assert statedoc.resolve({"items": "{search.results}"}, ctx) == {"items": [{"id": "a"}]}
    assert statedoc.resolve("{params.missing}", ctx) is None
    # CEL, as keep runs it: a missing key or a type mismatch is false, not a crash
    assert statedoc.holds("has(params.q) && params.q != ''", ctx)
    assert not statedoc.holds("params.missing > 1", ctx)
    assert not statedoc.holds("search.margin > 0.5", {"search": {"margin": None}})


def test_fragments_go_where_their_order_says() -> None:
    base = statedoc.parse("b", "match: sequence\nrules:\n  - id: one\n  - id: two\n")
    frags = [
        statedoc.parse_fragment("a", "order: before:two\nrules:\n  - id: mid\n"),
        statedoc.parse_fragment("z", "order: before\nrules:\n  - id: first\n"),
        statedoc.parse_fragment("m", "rules:\n  - id: last\n"),
    ]
    merged = statedoc.merged(base, frags)
    assert [r.id for r in merged.rules] == ["first", "one", "mid", "two", "last"]


def test_a_cursor_round_trips_and_a_forged_one_is_refused() -> None:
    token = encode_cursor(Cursor("query-explore", 3, {"search": {"results": [{"id": "a"}]}}))
    back = decode_cursor(token)
    assert back is not None and back.state == "query-explore" and back.ticks == 3
    assert decode_cursor("%%%") is None and decode_cursor("") is None
    assert decode_cursor(encode_cursor(Cursor("x", 0)) + "A" * 70_000) is None


# -- keep's named flows ---------------------------------------------------------------------


async def test_keeps_named_query_flows_answer(client, stocked) -> None:
    for state in ("query-resolve", "query-explore", "query-branch", "find-deep", "memory-search"):
        out = await _flow(client, stocked, state, {"query": "how do I make carbonara"})
        assert out["status"] in ("done", "stopped"), (state, out)
        found = [
            r["id"]
            for b in out["bindings"].values()
            if isinstance(b, dict)
            for r in b.get("results", [])
        ]
        assert "pasta" in found, (state, out["bindings"].keys())
        assert out["tried_queries"] == ["how do I make carbonara"]
    out = await _flow(client, stocked, "find-deep", {"query": ""})
    assert out["status"] == "error" and out["data"]["reason"] == "query required"


async def test_a_budget_stops_and_the_cursor_resumes(client, stocked) -> None:
    """query-resolve hands an ambiguous question to query-branch: with one
    tick the runtime stops between the two with a cursor; resuming runs
    query-branch, which stops by its own rule when no budget is left."""
    params = {"query": "morning", "margin_high": 2.0, "margin_low": 2.0}
    stopped = await _flow(client, stocked, "query-resolve", params, budget=1)
    assert stopped["status"] == "stopped" and stopped["cursor"], stopped
    assert stopped["history"] == ["query-resolve"] and stopped["ticks"] == 1
    assert stopped["data"]["reason"] == "budget" and stopped["data"]["results"]
    assert decode_cursor(stopped["cursor"]).state == "query-branch"
    resumed = await _flow(
        client, stocked, "__cursor__", params, budget=1, cursor_token=stopped["cursor"]
    )
    assert resumed["history"] == ["query-branch"] and resumed["ticks"] == 2, resumed
    assert resumed["status"] == "stopped" and resumed["data"] == {"reason": "ambiguous"}
    # the bindings made before the stop come back with the resumed flow
    assert {"search", "pivot1", "bridge"} <= set(resumed["bindings"])
    # with budget to spare the same question runs on through keep's flows
    wide = await _flow(client, stocked, "query-resolve", params, budget=5)
    assert wide["history"][:2] == ["query-resolve", "query-branch"], wide
    assert len(wide["history"]) > 2
    # budget 0: nothing runs, and the cursor names the state to start
    none = await _flow(client, stocked, "find-deep", {"query": "bread"}, budget=0)
    assert none["status"] == "stopped" and none["ticks"] == 0
    assert decode_cursor(none["cursor"]).state == "find-deep"


async def test_a_project_adds_its_own_flow_and_fragment(client, stocked) -> None:
    doc = (
        "match: sequence\nrules:\n"
        "  - id: hits\n    do: find\n    with: {query: '{params.query}', limit: 2}\n"
        "  - when: 'hits.count == 0'\n    return: {status: done, with: {answer: nothing}}\n"
        "  - then: {state: find-deep, with: {query: '{params.query}'}}\n"
    )
    await _put(client, stocked, ".state/recipes", doc)
    out = await _flow(client, stocked, "recipes", {"query": "sourdough"})
    assert out["status"] == "done" and out["history"] == ["recipes", "find-deep"], out
    assert out["bindings"]["hits"]["results"][0]["id"] == "bread"
    # a fragment of keep's get flow runs in its place, unless switched off
    frag = "order: after:item\nrules:\n  - id: extra\n    do: find\n    with: {query: ferry}\n"
    await _put(client, stocked, ".state/get/extra", frag)
    got = await _flow(client, stocked, "get", {"item_id": "rust"})
    assert got["bindings"]["extra"]["results"][0]["id"] == "harbour"
    r = await client.patch(
        "/v1/notes/.state%2Fget%2Fextra/tags",
        json={"set": {"active": "false"}},
        headers=stocked.headers,
    )
    assert r.status_code == 200, r.text
    got = await _flow(client, stocked, "get", {"item_id": "rust"})
    assert "extra" not in got["bindings"]
    # a doc that does not parse says so as the flow's error
    await _put(client, stocked, ".state/broken", "match: sometimes\nrules: []")
    out = await _flow(client, stocked, "broken", {})
    assert out["status"] == "error" and "match must be" in out["data"]["reason"]
    # a rule may end a flow as done, error or stopped, nothing else
    out = await _flow(client, stocked, "odd", {}, state_doc_yaml="match: sequence\nrules:\n"
                      "  - return: finished\n")  # fmt: skip
    assert out["status"] == "error" and "'finished'" in out["data"]["reason"], out
    out = await _flow(client, stocked, "odd", {}, state_doc_yaml="match: sequence\nrules:\n"
                      "  - return: {status: done, with: {1: one, 2.5: [{3: x}]}}\n")  # fmt: skip
    assert out["data"] == {"1": "one", "2.5": [{"3": "x"}]}, out


async def test_writes_in_a_read_only_flow_bind_an_error(client, stocked) -> None:
    out = await _flow(client, stocked, "tag", {"id": "rust", "tags": {"a": "b"}}, writable=False)
    assert out["status"] == "done" and "read-only" in out["bindings"]["tagged"]["error"]


# -- meta docs and prompts ----------------------------------------------------------------


async def test_a_project_meta_doc_is_a_context_section(client, stocked, make_pipeline) -> None:
    doc = (
        "match: all\nrules:\n  - id: risky\n    do: find\n"
        "    with: {similar_to: '{params.item_id}', tags: {risk: high}, limit: '{params.limit}'}\n"
    )
    await _put(client, stocked, ".meta/risks", doc)
    await _put(client, stocked, "flood", "The ferry pier floods at spring tide.", risk="high")
    await _put(client, stocked, "hail", "Hail dents the bread van.", risk="high")
    await run_all(make_pipeline(), client, stocked)
    r = await client.get("/v1/notes/harbour/context", headers=stocked.headers)
    # ranked by closeness to the note in view (the ferry), not by time
    assert [n["id"] for n in r.json()["meta"]["risks"]] == ["flood", "hail"]
    # keep's todo doc: an open commitment shows, a fulfilled one does not
    await _put(client, stocked, "promise", "I will fix the ferry timetable.", act="commitment",
               status="open")  # fmt: skip
    r = await client.get("/v1/notes/harbour/context", headers=stocked.headers)
    assert [n["id"] for n in r.json()["meta"]["todo"]] == ["promise"]


async def test_prompts_fill_from_their_flow(client, stocked) -> None:
    body = (
        "# Mine\n\nA test prompt.\n\n## Prompt\n\n"
        "Q: {text} ({since}..{until})\n{find}\nEdges: {edges|(none)}\n{{include:agent/footer}}"
    )
    r = await client.post(
        "/v1/notes",
        json={"id": ".prompt/agent/mine", "content": body, "tags": {"state": "get"}},
        headers=stocked.headers,
    )
    assert r.status_code == 200
    await _put(client, stocked, ".prompt/agent/footer", "## Prompt\n\nBe brief.")
    out = await _flow(
        client,
        stocked,
        "prompt",
        {"name": "mine", "text": "sourdough", "since": "P7D", "until": "2030-01-01"},
    )
    text = out["data"]["text"]
    assert text.startswith("Q: sourdough (P7D..2030-01-01)"), text
    assert "- bread:" in text and "Edges: (none)" in text and text.endswith("Be brief.")
    listed = await _flow(client, stocked, "prompt", {"list": True})
    names = {p["name"] for p in listed["data"]["prompts"]}
    # keep's ten agent prompts are seeded, and the project's own is listed too
    assert {"reflect", "query", "session-start", "session-end", "conversation", "mine"} <= names
    assert len(names) >= 11


async def test_an_upgrade_adds_missing_docs_and_keeps_edited_ones(fresh_database, settings) -> None:
    """``keepmem migrate`` / ``keepmem up`` write keep's docs a project lacks
    (a project made by an older keepmem) and leave the ones it edited. On a
    database of its own: the upgrade looks at every tenant's projects."""
    import httpx

    from app.db import Database
    from app.main import create_app
    from app.notes import service as notes
    from app.tenants import service as projects
    from tests.conftest import SECRET, Tenant

    local = settings.model_copy(update={"database_url": fresh_database.app_url})
    db = Database.from_settings(local)
    try:
        async with tenancy.system_transaction(db) as session:
            made = await accounts.create_tenant(session, name="upgraded", server_secret=SECRET)
            await accounts.create_tenant(session, name="up-to-date", server_secret=SECRET)
        tenant = Tenant(id=made.tenant.id, name="upgraded", key=made.key.secret)
        h = tenant.headers
        app = create_app(local, db=db)
        transport = httpx.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://t") as client,
        ):
            r = await client.delete("/v1/notes/.state%2Ffind-deep", headers=h)
            assert r.status_code == 200, r.text
            await _put(client, tenant, ".meta/todo", "match: all\nrules: []")
            async with tenancy.system_transaction(db) as session:
                # only the project that lacks a doc is visited, not every project
                lacking = await projects.projects_lacking(session, notes.system_doc_ids())
                assert [p.tenant_id for p in lacking] == [tenant.id]
                written = await accounts.seed_every_project(session)
            assert written == 1  # the deleted doc
            back = await client.get("/v1/notes/.state%2Ffind-deep", headers=h)
            assert back.status_code == 200 and "traverse" in back.json()["summary"]
            todo = await client.get("/v1/notes/.meta%2Ftodo", headers=h)
            assert todo.json()["summary"] == "match: all\nrules: []"
            async with tenancy.system_transaction(db) as session:
                assert await accounts.seed_every_project(session) == 0  # nothing left to add
    finally:
        await db.dispose()


async def test_prompt_includes_are_bounded(client, tenant) -> None:
    """Includes that fan out (a doc including another eight times, each
    including the next eight times...) stop at 50 docs, not 8^4 reads."""
    for level in range(4):
        inner = f"{{{{include:fan/{level + 1}}}}}" * 8 if level < 3 else "leaf"
        await _put(client, tenant, f".prompt/fan/{level}", "## Prompt\n\n" + inner)
    await _put(client, tenant, ".prompt/agent/fan", "## Prompt\n\n{{include:fan/0}}")
    out = await _flow(client, tenant, "prompt", {"name": "fan"})
    assert out["status"] == "error" and "at most 50" in out["data"]["error"], out
    await _put(client, tenant, ".prompt/agent/loop", "## Prompt\n\n{{include:agent/loop}}")
    out = await _flow(client, tenant, "prompt", {"name": "loop"})
    assert out["status"] == "error" and "cycle" in out["data"]["error"], out


async def test_what_one_request_may_run_is_bounded(client, tenant) -> None:
    rules = "".join(f"  - id: r{i}\n    do: find\n    with: {{prefix: x}}\n" for i in range(201))
    out = await _flow(client, tenant, "many", {}, state_doc_yaml="match: all\nrules:\n" + rules)
    assert out["status"] == "error" and "at most 200 actions" in out["data"]["reason"], out
    fewer = "".join(f"  - id: r{i}\n    do: find\n    with: {{prefix: x}}\n" for i in range(200))
    out = await _flow(client, tenant, "many", {}, state_doc_yaml="match: all\nrules:\n" + fewer)
    assert out["status"] == "done" and len(out["bindings"]) == 200


async def test_a_tag_declared_an_edge_tag_later_links_the_notes_already_holding_it(
    client, tenant, make_pipeline
) -> None:
    """keep backfills: notes written before ``_inverse`` was declared get
    their edges (and stub targets) in the background; taking it off again
    removes them."""
    h = tenant.headers
    await _put(client, tenant, "lesson-1", "How to read a stack trace", mentor="grace")
    await _put(client, tenant, "lesson-2", "How to bisect a bug", mentor="grace")
    assert (await client.get("/v1/notes/grace", headers=h)).status_code == 404
    await _put(client, tenant, ".tag/mentor", "Tag mentor: who taught it.")
    r = await client.patch(
        "/v1/notes/.tag%2Fmentor/tags", json={"set": {"_inverse": "mentee"}}, headers=h
    )
    assert r.status_code == 200, r.text
    await run_all(make_pipeline(), client, tenant)
    ctx = (await client.get("/v1/notes/grace/context", headers=h)).json()
    assert sorted(e["source_id"] for e in ctx["edges"]["mentee"]) == ["lesson-1", "lesson-2"]
    r = await client.patch("/v1/notes/.tag%2Fmentor/tags", json={"remove": ["_inverse"]}, headers=h)
    assert r.status_code == 200, r.text
    await run_all(make_pipeline(), client, tenant)
    ctx = (await client.get("/v1/notes/grace/context", headers=h)).json()
    assert ctx["edges"] == {}


async def test_one_action_touches_at_most_a_batch_of_notes(client, tenant) -> None:
    many = [f"n{i}" for i in range(101)]
    out = await _flow(client, tenant, "tag", {"items": many, "tags": {"a": "b"}})
    assert "at most 100" in out["bindings"]["tagged"]["error"], out
    doc = "match: all\nrules:\n  - id: t\n    do: traverse\n    with: {items: '{params.ids}'}\n"
    out = await _flow(client, tenant, "walk", {"ids": many}, state_doc_yaml=doc)
    assert "at most 100" in out["bindings"]["t"]["error"], out
