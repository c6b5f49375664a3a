"""Graph extraction: entities, mentions and relations from each note (spaCy
offline; an OpenAI-compatible model as the option), the entity APIs and
bounded walks; deep find through shared entities."""

from __future__ import annotations

import json

from tests.test_pipeline import jobs_of, put, run_all, run_job
from tests.vendors import Vendor, VendorServer


async def get(client, t, path: str, **params) -> dict:
    r = await client.get(path, params=params, headers=t.headers)
    assert r.status_code == 200, r.text
    return r.json()


async def test_two_notes_mentioning_a_person_are_linked(client, tenant, make_pipeline) -> None:
    await put(
        client,
        tenant,
        id="trip",
        content="Last spring Melanie Ortiz flew to Lisbon with her sister. "
        "Melanie Ortiz works for Google.",
    )
    await put(
        client,
        tenant,
        id="dinner",
        content="We had dinner at the harbour and Melanie Ortiz told us about her new garden.",
    )
    await put(client, tenant, id="other", content="The quarterly budget is due on Friday.")
    assert "extract_graph" in (await get(client, tenant, "/v1/notes/trip"))["pending"]
    await run_all(make_pipeline(), client, tenant)

    trip = await get(client, tenant, "/v1/notes/trip/entities")
    by_key = {e["key"]: e for e in trip["entities"]}
    melanie = by_key["person:melanie ortiz"]
    assert melanie["name"] == "Melanie Ortiz" and melanie["kind"] == "person"
    text = (await get(client, tenant, "/v1/notes/trip"))["summary"]
    assert [text[a:b] for a, b in melanie["spans"]] == ["Melanie Ortiz", "Melanie Ortiz"]
    assert "place:lisbon" in by_key and "org:google" in by_key
    assert {(r["subject"], r["predicate"], r["object"]) for r in trip["relations"]} >= {
        ("person:melanie ortiz", "work_for", "org:google")
    }

    notes = await get(client, tenant, "/v1/entities/person:melanie ortiz/notes")
    assert [n["id"] for n in notes["notes"]] == ["trip", "dinner"]  # most mentions first
    listed = await get(client, tenant, "/v1/entities", name="mel")
    assert listed["entities"][0] == {
        "key": "person:melanie ortiz",
        "name": "Melanie Ortiz",
        "kind": "person",
        "notes": 2,
    }

    # two hops: trip -> Melanie Ortiz -> dinner; one hop reaches only entities
    walked = await get(client, tenant, "/v1/graph/walk", note="trip", depth=2)
    reached = {(r["kind"], r["id"]): r for r in walked["reached"]}
    assert reached[("note", "dinner")]["hops"] == 2
    assert reached[("note", "dinner")]["via"] == {
        "kind": "entity",
        "id": "person:melanie ortiz",
        "predicate": "mentioned_in",
    }
    assert ("note", "other") not in reached
    one = await get(client, tenant, "/v1/graph/walk", note="trip", depth=1)
    assert {r["kind"] for r in one["reached"]} == {"entity"}
    # relation hop: Google is reached from Melanie through work_for
    from_person = await get(
        client, tenant, "/v1/graph/walk", entity="person:melanie ortiz", depth=1
    )
    assert ("entity", "org:google") in {(r["kind"], r["id"]) for r in from_person["reached"]}

    # deep find follows the shared person
    r = await client.post(
        "/v1/search",
        json={"query": "flight to Lisbon", "limit": 1, "deep": True, "deep_follow_depth": 2},
        headers=tenant.headers,
    )
    body = r.json()
    assert [n["id"] for n in body["notes"]] == ["trip"]
    assert [n["id"] for n in body["deep_groups"][0]["items"]] == ["dinner"]


async def test_reextraction_replaces_and_delete_removes(client, tenant, make_pipeline, db) -> None:
    await put(client, tenant, id="n", content="Oskar Lind visited Berlin.")
    await run_all(make_pipeline(), client, tenant)
    assert {e["key"] for e in (await get(client, tenant, "/v1/notes/n/entities"))["entities"]} >= {
        "person:oskar lind"
    }
    await put(client, tenant, id="n", content="Greta Holm visited Oslo.")
    await run_all(make_pipeline(), client, tenant)
    keys = {e["key"] for e in (await get(client, tenant, "/v1/notes/n/entities"))["entities"]}
    assert "person:oskar lind" not in keys and "person:greta holm" in keys
    assert (await client.delete("/v1/notes/n", headers=tenant.headers)).status_code == 200
    r = await client.get("/v1/entities/person:greta holm/notes", headers=tenant.headers)
    assert r.json()["notes"] == []


async def test_graph_is_per_tenant_and_validated(
    client, tenant, other_tenant, make_pipeline
) -> None:
    await put(client, other_tenant, id="x", content="Melanie Ortiz moved to Porto.")
    await run_all(make_pipeline(), client, other_tenant)
    r = await client.get("/v1/entities/person:melanie ortiz/notes", headers=tenant.headers)
    assert r.status_code == 404
    assert (await get(client, tenant, "/v1/entities"))["entities"] == []
    r = await client.get("/v1/graph/walk", params={"note": "x"}, headers=tenant.headers)
    assert r.status_code == 404
    r = await client.get("/v1/graph/walk", headers=tenant.headers)
    assert r.status_code == 400


async def test_llm_extractor_over_the_openai_wire_format(client, tenant, make_pipeline) -> None:
    reply = {
        "entities": [
            {"name": "Ada Brook", "type": "person"},
            {"name": "Nimbus Labs", "type": "org"},
            {"name": "Atlantis", "type": "place"},  # not in the text: dropped
        ],
        "relations": [{"subject": "Ada Brook", "predicate": "founded", "object": "Nimbus Labs"}],
    }
    vendor = Vendor(summary=json.dumps(reply))
    with VendorServer(vendor) as server:
        pipeline = make_pipeline(graph_provider="openai", graph_base_url=server.url + "/v1")
        await put(client, tenant, id="lab", content="Ada Brook founded Nimbus Labs in 2019.")
        for job in reversed(await jobs_of(client, tenant, kind="extract_graph")):
            assert await run_job(pipeline, tenant, job["id"]) == "done"
    assert vendor.requests[-1]["path"].endswith("/chat/completions")
    got = await get(client, tenant, "/v1/notes/lab/entities")
    assert [e["key"] for e in got["entities"]] == ["person:ada brook", "org:nimbus labs"]
    assert got["entities"][0]["spans"] == [[0, 9]]
    assert [(r["subject"], r["predicate"], r["object"]) for r in got["relations"]] == [
        ("person:ada brook", "founded", "org:nimbus labs")
    ]
