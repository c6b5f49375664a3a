"""find on real Postgres: hybrid fusion, filters inside both stages, parts,
versions, similar_to, recency decay, bias, isolation."""

from __future__ import annotations

from sqlalchemy import text

from tests.test_pipeline import put, run_all


async def find(client, t, **body) -> dict:
    r = await client.post("/v1/search", json=body, headers=t.headers)
    assert r.status_code == 200, r.text
    return r.json()


def ids(body: dict) -> list[str]:
    return [n["id"] for n in body["notes"]]


async def test_full_text_finds_a_note_the_moment_its_put_returns(client, tenant) -> None:
    await put(client, tenant, content="The zebra crossing near the bakery was repainted.", id="z")
    body = await find(client, tenant, query="zebra bakery")
    assert body["mode"] == "text" and ids(body) == ["z"]
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
    async with db.tenant_transaction(tenant.id) as s:
        await s.execute(
            text("UPDATE notes SET updated_at = now() - interval '30 days' WHERE id = 'old'")
        )
    body = await find(client, tenant, query="weekly design sync")
    scores = {n["id"]: n["score"] for n in body["notes"]}
    assert ids(body)[0] == "new"
    assert abs(scores["old"] / scores["new"] - 0.5) < 0.05  # one half-life
    async with db.tenant_transaction(tenant.id) as s:
        await s.execute(text("UPDATE projects SET settings = '{\"decay_half_life_days\": 0}'"))
    body = await find(client, tenant, query="weekly design sync")
    scores = {n["id"]: n["score"] for n in body["notes"]}
    assert abs(scores["old"] - scores["new"]) < 0.05  # decay off


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
        {"query": "x", "deep": True},
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
    assert old_score < 0.01  # years old with a 30-day half-life
    assert {n["id"]: n["score"] for n in undecayed["notes"]}["sale"] > 0.4
    r = await client.post(
        "/v1/search", json={"query": "x", "stages": "both"}, headers=tenant.headers
    )
    assert r.status_code == 400
