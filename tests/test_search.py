"""find on real Postgres: hybrid fusion, filters inside both stages, parts,
versions, similar_to, recency decay, bias, isolation."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from app import tenancy
from app.pipeline import dispatcher
from app.search import ranking
from tests.test_pipeline import jobs_of, put, run_all, run_job


async def find(client, t, **body) -> dict:
    r = await client.post("/v1/search", json=body, headers=t.headers)
    assert r.status_code == 200, r.text
    return r.json()


def ids(body: dict) -> list[str]:
    return [n["id"] for n in body["notes"]]


async def test_full_text_finds_a_note_the_moment_its_put_returns(client, tenant) -> None:
    await put(client, tenant, content="The zebra crossing near the bakery was repainted.", id="z")
    r = await client.post("/v1/search", json={"query": "zebra bakery"}, headers=tenant.headers)
    body = r.json()
    assert body["mode"] == "text" and ids(body) == ["z"]
    # where the time went, for operators and benchmarks
    timing = r.headers["server-timing"]
    assert timing.startswith("app;dur=") and "text;dur=" in timing and "vector;" not in timing
    assert body["notes"][0]["score"] > 0.99 and body["pending_embedding"] == 1


async def test_hybrid_fuses_meaning_and_words(client, tenant, make_pipeline) -> None:
    await put(client, tenant, content="Our puppy destroyed the new sneakers.", id="dog")
    await put(client, tenant, content="Sneakers are on sale at the mall.", id="sale")
    await put(client, tenant, content="The quarterly report is late.", id="report")
    await run_all(make_pipeline(), client, tenant)
    body = await find(client, tenant, query="dog chewed my sneakers")
    assert body["mode"] == "hybrid"
    assert ids(body)[:2] == ["dog", "sale"]  # words and meaning: dog; words only: sale
    assert 0 < body["notes"][1]["score"] < body["notes"][0]["score"] <= 1.0


async def test_filters_apply_inside_the_search(client, tenant, make_pipeline) -> None:
    for i in range(40):
        await put(
            client,
            tenant,
            content=f"Meeting notes about budget planning number {i}.",
            id=f"m{i}",
            tags={"team": "finance"},
        )
    await put(
        client, tenant, content="A short poem about the sea.", id="poem", tags={"team": "art"}
    )
    await put(
        client,
        tenant,
        content="Budget for the art supplies.",
        id="art-budget",
        tags={"team": "art"},
    )
    await run_all(make_pipeline(), client, tenant)
    # the rare tag still yields its full result list, not a starved one
    body = await find(client, tenant, query="budget planning meeting", tags={"team": "art"})
    assert set(ids(body)) == {"art-budget", "poem"}
    assert ids(body)[0] == "art-budget"
    body = await find(client, tenant, query="budget", scope="m1*", limit=20)
    assert set(ids(body)) == {"m1"} | {f"m1{i}" for i in range(10)}
    body = await find(client, tenant, query="budget", until="2000-01-01")
    assert ids(body) == []
    body = await find(client, tenant, query="budget", since="P1D", limit=3)
    assert len(body["notes"]) == 3


async def test_similar_to(client, tenant, make_pipeline) -> None:
    await put(client, tenant, content="How to bake sourdough bread at home.", id="bread")
    await put(client, tenant, content="Kneading dough and letting it rise overnight.", id="dough")
    await put(client, tenant, content="Tax forms are due in April.", id="tax")
    r = await client.post("/v1/search", json={"similar_to": "bread"}, headers=tenant.headers)
    assert r.status_code == 409  # not embedded yet
    await run_all(make_pipeline(), client, tenant)
    body = await find(client, tenant, similar_to="bread")
    assert body["mode"] == "similar" and ids(body)[0] == "dough" and "bread" not in ids(body)
    body = await find(client, tenant, similar_to="bread", include_self=True)
    assert ids(body)[0] == "bread"
    r = await client.post("/v1/search", json={"similar_to": "ghost"}, headers=tenant.headers)
    assert r.status_code == 404


async def test_parts_and_versions_are_found_by_their_own_ids(client, tenant, make_pipeline) -> None:
    doc = (
        "# Travel\n\n"
        + "We flew to Lisbon and ate pastel de nata by the river. " * 8
        + "\n\n# Work\n\n"
        + "The compiler refactor cut build times in half. " * 8
    )
    await put(client, tenant, content=doc, id="journal", analyze=True)
    await put(client, tenant, content="Old plan: hike the Alps in July.", id="plan")
    await put(client, tenant, content="New plan: stay home and garden.", id="plan")
    await run_all(make_pipeline(part_target_chars=500), client, tenant)
    body = await find(client, tenant, query="compiler build times")
    assert "journal@P{2}" in ids(body)[:2]
    body = await find(client, tenant, query="hike the Alps")
    assert "plan@V{1}" not in ids(body)
    body = await find(client, tenant, query="hike the Alps", include_versions=True)
    assert ids(body)[0] == "plan@V{1}"
    body = await find(client, tenant, query="compiler build", include_parts=False)
    assert all("@P" not in i for i in ids(body))


async def test_recency_decay_and_its_half_life(client, tenant, db) -> None:
    await put(client, tenant, content="Weekly sync with the design team.", id="new")
    await put(client, tenant, content="Weekly sync with the design team!", id="old")
    async with tenancy.tenant_id_transaction(db, tenant.id) as s:
        await s.execute(
            text(
                "UPDATE notes SET created_at = now() - interval '30 days', "
                "updated_at = now() - interval '30 days' WHERE id = 'old'"
            )
        )
    body = await find(client, tenant, query="weekly design sync")
    scores = {n["id"]: n["score"] for n in body["notes"]}
    assert ids(body) == ["new", "old"]  # equally relevant: the newer first
    # recency is a bonus, bounded: half of it at one half-life older
    assert scores["new"] == 1.0
    bonus = ranking.RECENCY_WEIGHT / ranking.SCALE
    assert abs((scores["new"] - scores["old"]) - bonus / 2) < 1e-4
    r = await client.patch("/v1/settings", json={"decay_half_life_days": 0}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    body = await find(client, tenant, query="weekly design sync")
    scores = {n["id"]: n["score"] for n in body["notes"]}
    assert abs(scores["old"] - scores["new"]) < 1e-6  # decay off


async def test_bias_boosts_demotes_and_excludes(client, tenant) -> None:
    await put(client, tenant, content="Coffee beans from Ethiopia.", id="a")
    await put(client, tenant, content="Coffee beans from Colombia.", id="b")
    body = await find(client, tenant, query="coffee beans", bias={"b": 3.0})
    assert ids(body)[0] == "b"
    body = await find(client, tenant, query="coffee beans", bias={"a": 0})
    assert ids(body) == ["b"]


async def test_results_never_cross_tenants(client, tenant, other_tenant, make_pipeline) -> None:
    await put(client, tenant, content="Launch codes for the orbital rocket.", id="secret")
    await run_all(make_pipeline(), client, tenant)
    assert ids(await find(client, other_tenant, query="orbital rocket launch codes")) == []
    r = await client.post("/v1/search", json={"similar_to": "secret"}, headers=other_tenant.headers)
    assert r.status_code == 404


async def test_find_rejects_bad_requests(client, tenant) -> None:
    for body in (
        {},
        {"query": "x", "similar_to": "y"},
        {"query": "x", "bias": {"a": -1}},
        {"query": "x", "tags": {"bad key": "v"}},
        {"query": "x", "since": "whenever"},
    ):
        r = await client.post("/v1/search", json=body, headers=tenant.headers)
        assert r.status_code == 400, body
    r = await client.post("/v1/search", json={"query": "x", "limit": 0}, headers=tenant.headers)
    assert r.status_code == 422
    assert (await client.post("/v1/search", json={"query": "x"})).status_code == 401


async def test_single_stages_and_decay_override(client, tenant, make_pipeline, db) -> None:
    await put(client, tenant, content="The puppy destroyed my sneakers.", id="dog")
    await put(
        client,
        tenant,
        content="Sneakers on sale downtown.",
        id="sale",
        created_at="2020-01-01T00:00:00",
    )
    await run_all(make_pipeline(), client, tenant)
    # an imported note keeps its time: created and last updated then
    sale = (await client.get("/v1/notes/sale", headers=tenant.headers)).json()
    assert sale["tags"]["_updated"] == "2020-01-01T00:00:00"
    text_only = await find(client, tenant, query="young canine chewed footwear", stages="text")
    assert text_only["mode"] == "text" and ids(text_only) == []
    vector_only = await find(
        client, tenant, query="young canine chewed footwear", stages="vector", half_life_days=0
    )
    assert vector_only["mode"] == "vector" and ids(vector_only)[0] == "dog"
    decayed = await find(client, tenant, query="sneakers", stages="text")
    undecayed = await find(client, tenant, query="sneakers", stages="text", half_life_days=0)
    old_score = {n["id"]: n["score"] for n in decayed["notes"]}["sale"]
    # years old with a 30-day half-life: no recency bonus, but not buried
    # (an imported history keeps its relevance)
    undecayed_score = {n["id"]: n["score"] for n in undecayed["notes"]}["sale"]
    assert undecayed_score > 0.4 and abs(undecayed_score - old_score) < 1e-3
    r = await client.post(
        "/v1/search", json={"query": "x", "stages": "both"}, headers=tenant.headers
    )
    assert r.status_code == 422  # the schema lists the stages


async def test_full_text_and_tags_use_their_indexes_under_row_level_security(
    client, tenant, db
) -> None:
    await put(client, tenant, content="Zebra crossing.", id="z", tags={"topic": "roads"})
    # The system context's policy (tenant OR system) offers no btree path, so
    # the only index a plan can use is the condition's own GIN index, and only
    # if its operator is LEAKPROOF (migration 0003); otherwise RLS forces a
    # row-by-row check first.
    async with tenancy.system_transaction(db) as s:
        await s.execute(text("SET LOCAL enable_seqscan = off"))
        plans = {}
        for name, cond in (
            ("fts", "fts @@ to_tsquery('simple', 'zebra')"),
            ("tags", "tag_index @> ARRAY['topic=roads']"),
        ):
            rows = await s.execute(text(f"EXPLAIN SELECT id FROM notes WHERE {cond}"))
            plans[name] = "\n".join(rows.scalars())
    assert "Index Scan on ix_notes_fts" in plans["fts"], plans["fts"]
    assert "Index Scan on ix_notes_tag_index" in plans["tags"], plans["tags"]


async def test_common_words_of_a_big_project_leave_questions(
    client, tenant, make_pipeline, db
) -> None:
    for i in range(12):
        await put(client, tenant, content=f"Weekly meeting number {i} about plans.", id=f"m{i}")
    await put(client, tenant, content="The walrus meeting went well.", id="walrus")
    # Before the count, every word of the question may match.
    body = await find(client, tenant, query="walrus meeting", limit=20)
    assert len(ids(body)) == 13
    pipeline = make_pipeline(fts_common_term_notes=10, term_stats_min_notes=10)
    await dispatcher.reconcile(pipeline, limit=100_000)
    counts = await jobs_of(client, tenant, kind="term_stats")
    assert len(counts) == 1 and counts[0]["note_id"] is None
    assert await run_job(pipeline, tenant, counts[0]["id"]) == "done"
    await dispatcher.reconcile(pipeline, limit=100_000)  # fresh: nothing new queued
    assert len(await jobs_of(client, tenant, kind="term_stats")) == 1
    async with tenancy.tenant_id_transaction(db, tenant.id) as s:
        common = dict((await s.execute(text("SELECT lexeme, ndoc FROM term_stats"))).all())
    assert common["meet"] >= 13 and common["week"] >= 12 and "walrus" not in common
    body = await find(client, tenant, query="walrus meeting", limit=20)
    # the rare word decides (its neighbour on the timeline, m11, shares no
    # word with the question and has no vector yet: context lifts results, it
    # does not make them)
    assert ids(body) == ["walrus"]
    body = await find(client, tenant, query="weekly meeting plans", limit=20)
    found = ids(body)  # all common: all must match (walrus only as context, last)
    assert sorted(found[:12]) == sorted(f"m{i}" for i in range(12)) and found[12:] in (
        [],
        ["walrus"],
    )


def test_edge_tag_values_name_notes() -> None:
    from app.graph.service import edge_target

    assert edge_target("Caroline") == "Caroline"
    assert edge_target("[[Caroline|Caro]]") == "Caroline"
    assert edge_target("Caroline[[Caro]]") == "Caroline"
    assert edge_target("[The site](https://example.com/a)") == "https://example.com/a"
    assert edge_target("   ") is None


async def _edges(db, tenant) -> list[tuple[str, str, str]]:
    async with tenancy.tenant_id_transaction(db, tenant.id) as s:
        rows = await s.execute(
            text("SELECT source_id, predicate, target_id FROM edges ORDER BY 1, 2, 3")
        )
        return [tuple(r) for r in rows]


async def test_edge_tags_make_edges_and_stubs(client, tenant, db) -> None:
    await put(
        client, tenant, content="Caroline: I adopted a dog.", id="t1", tags={"speaker": "Caroline"}
    )
    await put(client, tenant, content="Plain note.", id="t2", tags={"topic": "misc"})
    assert await _edges(db, tenant) == [("t1", "speaker", "Caroline")]
    stub = (await client.get("/v1/notes/Caroline", headers=tenant.headers)).json()
    assert stub["summary"] == "" and stub["tags"]["_source"] == "auto-vivify"
    # a stub has no text: never a find result
    assert "Caroline" not in ids(await find(client, tenant, query="Caroline"))
    r = await client.patch(
        "/v1/notes/t1/tags", json={"set": {"speaker": "[[Melanie|Mel]]"}}, headers=tenant.headers
    )
    assert r.status_code == 200
    assert await _edges(db, tenant) == [
        ("t1", "speaker", "Caroline"),
        ("t1", "speaker", "Melanie"),
    ]
    r = await client.patch(
        "/v1/notes/t1/tags", json={"remove": ["speaker"]}, headers=tenant.headers
    )
    assert r.status_code == 200 and await _edges(db, tenant) == []
    await put(client, tenant, content="Caroline: again.", id="t3", tags={"speaker": "Caroline"})
    assert (await client.delete("/v1/notes/t3", headers=tenant.headers)).status_code == 200
    assert await _edges(db, tenant) == []


async def test_deep_find_follows_edges(client, tenant, other_tenant, make_pipeline) -> None:
    said = {"speaker": "Caroline"}
    await put(client, tenant, content="Caroline adopted a rescue dog named Rex.", id="a", tags=said)
    await put(client, tenant, content="Caroline went hiking in the Alps.", id="b", tags=said)
    await put(
        client, tenant, content="Melanie painted a sunset.", id="c", tags={"speaker": "Melanie"}
    )
    # another tenant's Caroline is another note: never reached
    await put(client, other_tenant, content="Caroline hikes too.", id="x", tags=said)
    await run_all(make_pipeline(), client, tenant)
    body = await find(client, tenant, query="dog adoption", limit=1, deep=True)
    assert ids(body) == ["a"]
    assert [(g["id"], [n["id"] for n in g["items"]]) for g in body["deep_groups"]] == [("a", ["b"])]
    assert -1 <= body["deep_groups"][0]["items"][0]["score"] < 1  # cosine to the query
    # one hop reaches only the stub, which is not returned
    body = await find(client, tenant, query="dog adoption", limit=1, deep=True, deep_follow_depth=1)
    assert body["deep_groups"] == []
    body = await find(client, tenant, query="dog adoption", limit=1)
    assert body["deep_groups"] == []
    # similar_to follows edges too; a deleted note is gone from the walk
    body = await find(client, tenant, similar_to="b", limit=1, deep=True)
    assert ids(body) == ["a"] and body["deep_groups"] == []  # b is the anchor, not a result
    assert (await client.delete("/v1/notes/b", headers=tenant.headers)).status_code == 200
    body = await find(client, tenant, query="dog adoption", limit=1, deep=True)
    assert body["deep_groups"] == []
    r = await client.post(
        "/v1/search",
        json={"query": "x", "deep": True, "deep_follow_depth": 0},
        headers=tenant.headers,
    )
    assert r.status_code == 422


def _adds_up(note: dict) -> None:
    """A result's explanation accounts for its score exactly (to rounding)."""
    why = note["explain"]
    bonuses = ("relevance", "neighbour", "episode", "date", "tag", "recency")
    total = sum(why[k] for k in bonuses) / why["scale"] * why["bias"]
    assert abs(min(total, 1.0) - note["score"]) < 1e-5, note


async def test_explain_accounts_for_every_score(client, tenant, make_pipeline) -> None:
    await put(
        client,
        tenant,
        id="may",
        content="Melanie ran a charity race for mental health.",
        created_at="2023-05-08T10:00:00",
        tags={"speaker": "Melanie", "session": "s1"},
    )
    await put(client, tenant, id="next", content="Caroline cheered Melanie from the side.",
              created_at="2023-05-08T10:01:00", tags={"session": "s1"})  # fmt: skip
    # the rest of both sessions: enough turns side by side for the session
    # tag to show it groups them (one pair alone could be chance)
    for n, content in enumerate(("They got coffee after.", "It rained all day.")):
        await put(client, tenant, id=f"s1-{n}", content=content,
                  created_at=f"2023-05-08T10:0{n + 2}:00", tags={"session": "s1"})  # fmt: skip
    for n, content in enumerate(("A recipe for lemon cake.", "Bake for forty minutes.")):
        await put(client, tenant, id=("other", "bake")[n], content=content,
                  created_at=f"2024-01-01T00:0{n}:00", tags={"session": "s2"})  # fmt: skip
    await run_all(make_pipeline(), client, tenant)
    plain = await find(client, tenant, query="charity race")
    assert all("explain" not in n for n in plain["notes"])  # only when asked

    body = await find(client, tenant, query="What did Melanie run on 8 May, 2023?", explain=True)
    by_id = {n["id"]: n for n in body["notes"]}
    assert ids(body)[0] == "may"
    for note in body["notes"]:
        _adds_up(note)
        why = note["explain"]
        share = ranking.TEXT_SHARE
        meaning = min(max(why["vector"] / ranking.FLOOR, 0.0), 1.0)
        assert why["relevance"] == pytest.approx(
            share * why["text"] * meaning + (1 - share) * why["vector"], abs=1e-5
        )
    may = by_id["may"]["explain"]
    # the tag bonus as strong as the evidence behind the context that lifts it
    assert may["date"] == ranking.DATE_WEIGHT and 0 < may["tag"] <= ranking.TAG_WEIGHT
    # its share of the question's words: the best here, not a full match
    assert 0 < may["text"] < 1.0 and may["bm25"] > 0 and may["vector"] > 0.2
    assert may["text"] == max(n["explain"]["text"] for n in body["notes"])
    # the turn after the match (the same session) is lifted by its neighbour, and dated too
    nxt = by_id["next"]["explain"]
    assert nxt["neighbour"] > 0 and nxt["date"] == ranking.DATE_WEIGHT
    assert "other" not in by_id or by_id["other"]["explain"]["date"] == 0

    # one stage alone is its own relevance; bias is applied last
    text_only = await find(client, tenant, query="charity race", stages="text", explain=True,
                           bias={"may": 0.5})  # fmt: skip
    for note in text_only["notes"]:
        _adds_up(note)
        assert note["explain"]["vector"] is None
        assert note["explain"]["relevance"] == note["explain"]["text"]
    assert text_only["notes"][0]["explain"]["bias"] == 0.5
    similar = await find(client, tenant, similar_to="may", explain=True)
    for note in similar["notes"]:
        _adds_up(note)
        assert note["explain"]["relevance"] == note["explain"]["vector"]
