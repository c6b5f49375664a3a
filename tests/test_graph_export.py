"""The graph taken away (issue 35, item 6): GraphML and CSV exports of
entities, mentions, relations, note edges and topic nodes (``topic`` tag
values), graph statistics, and the SDK's methods for both. What is exported
is what the caller can see: one tenant's export holds nothing of another's,
and a tag-scoped key's holds only its own notes' topics and mentions."""

from __future__ import annotations

import csv
import io
import json
import xml.etree.ElementTree as ET
from typing import Any

import httpx
import pytest
from keepmem_client import AsyncKeepmem
from sqlalchemy import text

from app import tenancy
from app.graph import export
from app.graph import service as graph_service
from tests.test_pipeline import jobs_of, put, run_all, run_job
from tests.vendors import Vendor, VendorServer

NS = {"g": export.GRAPHML_NS}
# An organisation whose name holds everything XML and CSV must escape.
FIRM = 'O\'Brien, "Smith" & <Sons>\nLtd'
FIRM_KEY = 'org:o\'brien, "smith" & <sons> ltd'
ODD_TOPIC = 'a, "b" & <c>'
ODD_TEXT = 'Tom & Jerry <3 "cartoons", said the memo'


async def get(client, headers: dict, path: str, **params: Any) -> httpx.Response:
    r = await client.get(path, params=params, headers=headers)
    assert r.status_code == 200, r.text
    return r


def parse_graphml(body: bytes) -> tuple[dict[str, dict], list[dict], dict[str, str]]:
    """(nodes by id, edges, graph data) with attributes by their declared names."""
    root = ET.fromstring(body)
    assert root.tag == f"{{{export.GRAPHML_NS}}}graphml"
    names = {k.get("id"): k.get("attr.name") for k in root.findall("g:key", NS)}
    domains = {k.get("id"): k.get("for") for k in root.findall("g:key", NS)}
    graph = root.find("g:graph", NS)
    assert graph is not None and graph.get("edgedefault") == "directed"

    def data(el: ET.Element, domain: str) -> dict[str, str]:
        out = {}
        for d in el.findall("g:data", NS):
            assert domains[d.get("key")] == domain, d.get("key")  # every key is declared
            out[names[d.get("key")]] = d.text or ""
        return out

    nodes: dict[str, dict] = {}
    for n in graph.findall("g:node", NS):
        assert n.get("id") not in nodes, n.get("id")
        nodes[n.get("id")] = data(n, "node")
    edges = [
        {"source": e.get("source"), "target": e.get("target"), **data(e, "edge")}
        for e in graph.findall("g:edge", NS)
    ]
    assert {e["source"] for e in edges} | {e["target"] for e in edges} <= set(nodes)
    return nodes, edges, data(graph, "graph")


def parse_csv(body: str) -> tuple[list[str], list[list[str]]]:
    rows = list(csv.reader(io.StringIO(body, newline="")))
    return rows[0], rows[1:]


async def csv_table(client, headers: dict, table: str) -> tuple[list[str], list[list[str]]]:
    r = await get(client, headers, "/v1/graph/export", format="csv", table=table)
    assert r.headers["content-type"].startswith("text/csv")
    assert r.headers["x-truncated"] == "false"
    return parse_csv(r.text)


async def stored_graph(client, headers: dict, note_ids: list[str]) -> dict[str, Any]:
    """What the per-note graph API says was extracted: the truth exports are checked against."""
    entities: dict[str, tuple[str, str]] = {}
    mentions: set[tuple[str, str, int, int]] = set()
    relations: set[tuple[str, str, str, str, int, int]] = set()
    for note_id in note_ids:
        body = (await get(client, headers, f"/v1/notes/{note_id}/entities")).json()
        for e in body["entities"]:
            entities[e["key"]] = (e["name"], e["kind"])
            mentions.update((note_id, e["key"], a, b) for a, b in e["spans"])
        relations.update(
            (note_id, r["subject"], r["predicate"], r["object"], *r["span"])
            for r in body["relations"]
        )
    return {"entities": entities, "mentions": mentions, "relations": relations}


async def build_world(client, tenant, make_pipeline, db) -> None:
    """Notes spaCy finds people, places and organisations in, topic tags
    (a list, a case variant, characters CSV and XML escape), an edge tag, a
    provenance edge to a part, a stub carrying a topic, and a note whose
    entity (from the OpenAI-compatible extractor) has a name full of
    characters to escape."""
    await put(client, tenant, id="trip",
              content="Last spring Melanie Ortiz flew to Lisbon with her sister. "
              "Melanie Ortiz works for Google.",
              tags={"topic": ["Travel", "family"], "speaker": "R&D Team"})  # fmt: skip
    await put(client, tenant, id="dinner",
              content="We had dinner at the harbour and Melanie Ortiz told us about her garden.",
              tags={"topic": "travel"})  # fmt: skip
    await put(client, tenant, id="odd", content=ODD_TEXT, tags={"topic": ODD_TOPIC})
    await put(client, tenant, id="memo", content="The budget is due on Friday.")
    await put(client, tenant, id=".graph-sys", content="A system note.", tags={"topic": "system"})
    r = await client.post(
        "/v1/flow",
        json={"state": "stub", "params": {"id": "ghost", "tags": {"topic": "ghost"}}},
        headers=tenant.headers,
    )
    assert r.status_code == 200, r.text
    async with tenancy.tenant_id_transaction(db, tenant.id) as s:
        await s.execute(
            text(
                "INSERT INTO edges (tenant_id, project_id, source_id, predicate, target_id, origin)"
                " SELECT tenant_id, project_id, id, 'derived_from', 'doc@P3', 'provenance'"
                " FROM notes WHERE id = 'memo'"
            )
        )
    await put(client, tenant, id="firm", content=f"Ada Brook joined {FIRM} last year.")
    reply = {
        "entities": [{"name": "Ada Brook", "type": "person"}, {"name": FIRM, "type": "org"}],
        "relations": [{"subject": "Ada Brook", "predicate": "joined", "object": FIRM}],
    }
    with VendorServer(Vendor(summary=json.dumps(reply))) as server:
        llm = make_pipeline(graph_provider="openai", graph_base_url=server.url + "/v1")
        for job in await jobs_of(client, tenant, kind="extract_graph", note_id="firm"):
            assert await run_job(llm, tenant, job["id"]) == "done"
    await run_all(make_pipeline(), client, tenant)


async def test_graphml_and_csv_hold_what_was_stored(
    client, tenant, other_tenant, make_pipeline, db
) -> None:
    await build_world(client, tenant, make_pipeline, db)
    truth = await stored_graph(client, tenant.headers, ["trip", "dinner", "odd", "memo", "firm"])
    assert "person:melanie ortiz" in truth["entities"] and FIRM_KEY in truth["entities"]
    assert truth["entities"][FIRM_KEY] == (FIRM, "org")
    assert ("trip", "person:melanie ortiz", "work_for", "org:google") in {
        r[:4] for r in truth["relations"]
    }

    # -- GraphML -----------------------------------------------------------------------
    r = await get(client, tenant.headers, "/v1/graph/export")
    assert r.headers["content-type"].startswith(export.GRAPHML_MEDIA_TYPE)
    assert r.headers["x-truncated"] == "false"
    assert "graph.graphml" in r.headers["content-disposition"]
    nodes, edges, graph = parse_graphml(r.content)
    assert graph == {"truncated": "false"}
    entity_nodes = {k: v for k, v in nodes.items() if v["type"] == "entity"}
    assert {k: (v["name"], v["kind"]) for k, v in entity_nodes.items()} == truth["entities"]
    assert nodes[FIRM_KEY]["name"] == FIRM  # escaped by the writer, read back whole
    assert nodes["note:trip"]["summary"].startswith("Last spring Melanie Ortiz")
    assert nodes["note:odd"]["summary"] == ODD_TEXT
    assert nodes["note:R&D Team"]["stub"] == "true"  # the edge tag's target, made a stub
    assert nodes["note:doc@P3"]["part"] == "true"
    assert "part" not in nodes["note:trip"] and "stub" not in nodes["note:trip"]
    topics = {k: v for k, v in nodes.items() if v["type"] == "topic"}
    # "Travel" and "travel" are one topic (tag filters compare values case-folded);
    # the stub's topic and system notes' tags make no topic node
    assert set(topics) == {"topic:travel", "topic:family", f"topic:{ODD_TOPIC}"}
    assert topics[f"topic:{ODD_TOPIC}"]["name"] == ODD_TOPIC

    def by_type(kind: str) -> set[tuple]:
        out = set()
        for e in edges:
            if e["type"] != kind:
                continue
            rest = tuple(
                e.get(k) for k in ("predicate", "note", "span_start", "span_end", "origin")
            )
            out.add((e["source"], e["target"], *rest))
        return out

    assert by_type("mention") == {
        (f"note:{n}", k, "mentions", None, str(a), str(b), None) for n, k, a, b in truth["mentions"]
    }
    assert by_type("relation") == {
        (s, o, p, n, str(a), str(b), None) for n, s, p, o, a, b in truth["relations"]
    }
    assert ("person:ada brook", FIRM_KEY, "joined", "firm") in {t[:4] for t in by_type("relation")}
    assert by_type("edge") == {
        ("note:trip", "note:R&D Team", "speaker", None, None, None, "tag"),
        ("note:memo", "note:doc@P3", "derived_from", None, None, None, "provenance"),
    }
    assert {(e["source"], e["target"]) for e in edges if e["type"] == "topic"} == {
        ("note:trip", "topic:travel"),
        ("note:trip", "topic:family"),
        ("note:dinner", "topic:travel"),
        ("note:odd", f"topic:{ODD_TOPIC}"),
    }

    # -- CSV, one table at a time ------------------------------------------------------
    header, rows = await csv_table(client, tenant.headers, "entities")
    assert header == ["key", "name", "kind"]
    assert {row[0]: (row[1], row[2]) for row in rows} == truth["entities"]  # FIRM's newline too
    header, rows = await csv_table(client, tenant.headers, "mentions")
    assert header == ["note_id", "entity_key", "span_start", "span_end"]
    assert {(n, k, int(a), int(b)) for n, k, a, b in rows} == truth["mentions"]
    header, rows = await csv_table(client, tenant.headers, "relations")
    assert header[:4] == ["note_id", "subject_key", "predicate", "object_key"]
    assert {(n, s, p, o, int(a), int(b)) for n, s, p, o, a, b in rows} == truth["relations"]
    header, rows = await csv_table(client, tenant.headers, "edges")
    assert header == ["source_id", "predicate", "target_id", "origin"]
    assert sorted(map(tuple, rows)) == [
        ("memo", "derived_from", "doc@P3", "provenance"),
        ("trip", "speaker", "R&D Team", "tag"),
    ]
    header, rows = await csv_table(client, tenant.headers, "topics")
    assert header == ["topic", "value", "note_id"]
    assert sorted(map(tuple, rows)) == sorted(
        [("travel", "travel", "dinner"), ("travel", "Travel", "trip"),
         ("family", "family", "trip"), (ODD_TOPIC, ODD_TOPIC, "odd")]
    )  # fmt: skip

    # -- statistics --------------------------------------------------------------------
    stats = (await get(client, tenant.headers, "/v1/graph/stats")).json()
    kinds: dict[str, int] = {}
    for _, kind in truth["entities"].values():
        kinds[kind] = kinds.get(kind, 0) + 1
    assert stats["entities"] == len(truth["entities"]) and stats["entities_by_kind"] == kinds
    assert stats["mentions"] == len(truth["mentions"])
    assert stats["notes_with_mentions"] == len({m[0] for m in truth["mentions"]})
    assert stats["relations"] == len(truth["relations"])
    predicates: dict[str, int] = {}
    for r in truth["relations"]:
        predicates[r[2]] = predicates.get(r[2], 0) + 1
    assert {p["predicate"]: p["count"] for p in stats["relations_by_predicate"]} == predicates
    assert stats["note_edges"] == 2
    assert {p["predicate"]: p["count"] for p in stats["note_edges_by_predicate"]} == {
        "speaker": 1,
        "derived_from": 1,
    }
    assert stats["topics"] == 3 and stats["notes_with_topics"] == 3
    assert stats["top_topics"][0] == {"topic": "travel", "notes": 2}
    assert {t["topic"] for t in stats["top_topics"]} == {"travel", "family", ODD_TOPIC}
    assert stats["top_entities"][0] == {
        "key": "person:melanie ortiz",
        "name": "Melanie Ortiz",
        "kind": "person",
        "notes": 2,
    }
    expected = graph_service.components([(r[1], r[3]) for r in truth["relations"]])
    related = expected[1]
    isolated = len(truth["entities"]) - related
    assert stats["components"]["count"] == expected[0] + isolated
    assert stats["components"]["isolated"] == isolated
    assert stats["components"]["capped"] is False

    # -- the other tenant sees none of it ----------------------------------------------
    await put(client, other_tenant, id="elsewhere", content="Quiet note.", tags={"topic": "own"})
    nodes, edges, _ = parse_graphml(
        (await get(client, other_tenant.headers, "/v1/graph/export")).content
    )
    assert set(nodes) == {"note:elsewhere", "topic:own"} and len(edges) == 1
    for table in export.TABLES:
        _, rows = await csv_table(client, other_tenant.headers, table)
        assert rows == ([["own", "own", "elsewhere"]] if table == "topics" else []), table
    theirs = (await get(client, other_tenant.headers, "/v1/graph/stats")).json()
    assert theirs["entities"] == theirs["mentions"] == theirs["note_edges"] == 0
    assert theirs["topics"] == 1 and theirs["top_entities"] == []


async def test_sdk_reads_exports_and_stats(client, asgi_app, tenant, make_pipeline) -> None:
    await put(client, tenant, id="trip", tags={"topic": "travel"},
              content="Melanie Ortiz flew to Lisbon. Melanie Ortiz works for Google.")  # fmt: skip
    await run_all(make_pipeline(), client, tenant)
    transport = httpx.ASGITransport(app=asgi_app)
    async with AsyncKeepmem("http://keepmem.test", tenant.key, transport=transport) as km:
        nodes, _, _ = parse_graphml((await km.graph_export()).encode())
        assert {"note:trip", "topic:travel", "person:melanie ortiz"} <= set(nodes)
        header, rows = parse_csv(await km.graph_export("csv", table="topics"))
        assert header == ["topic", "value", "note_id"] and rows == [["travel", "travel", "trip"]]
        stats = await km.graph_stats()
        assert stats["topics"] == 1 and stats["notes_with_mentions"] == 1


async def test_caps_are_stated_and_bad_requests_refused(
    client, tenant, make_pipeline, monkeypatch
) -> None:
    for i in range(3):
        await put(client, tenant, id=f"n{i}", content=f"Plain note {i}.", tags={"topic": f"t{i}"})
    await put(client, tenant, id="job", content="Melanie Ortiz works for Google.")
    await run_all(make_pipeline(), client, tenant)
    monkeypatch.setattr(graph_service, "EXPORT_ROWS", 2)
    r = await get(client, tenant.headers, "/v1/graph/export", format="csv", table="topics")
    assert r.headers["x-truncated"] == "true" and len(parse_csv(r.text)[1]) == 2
    r = await get(client, tenant.headers, "/v1/graph/export")
    nodes, _, graph = parse_graphml(r.content)
    assert r.headers["x-truncated"] == "true"
    assert graph["truncated"] == "true" and "topics" in graph["truncated_tables"].split(",")
    assert "edges" not in graph["truncated_tables"].split(",")
    assert len([n for n in nodes.values() if n["type"] == "topic"]) == 2
    r = await get(client, tenant.headers, "/v1/graph/export", format="csv", table="edges")
    assert r.headers["x-truncated"] == "false"

    stats = (await get(client, tenant.headers, "/v1/graph/stats")).json()
    assert stats["relations"] >= 1 and stats["components"]["capped"] is False
    assert stats["components"]["relation_pairs"] == stats["relations"]
    monkeypatch.setattr(graph_service, "COMPONENT_RELATIONS", 0)
    capped = (await get(client, tenant.headers, "/v1/graph/stats")).json()["components"]
    assert capped["capped"] is True and capped["relation_pairs"] == 0 and capped["limit"] == 0

    for params, status in (
        ({"format": "csv"}, 400),  # which table?
        ({"format": "graphml", "table": "entities"}, 400),
        ({"format": "xml"}, 422),
        ({"format": "csv", "table": "notes"}, 422),
    ):
        r = await client.get("/v1/graph/export", params=params, headers=tenant.headers)
        assert r.status_code == status, (params, r.text)
        assert r.json()["error"]


def test_graphml_writer_keeps_the_document_valid() -> None:
    """Characters XML 1.0 cannot carry are replaced; an edge whose end was
    cut away by a cap still has a node."""
    rows = export.GraphRows(
        entities=[],
        mentions=[("n", "person:ada", 0, 3)],
        relations=[("n", "person:ada", "knows", "person:bo", 0, 9)],
        edges=[("n", "derived_from", "doc@P1", "provenance")],
        topics=[],
        notes={"n": export.NoteHead("bell \x07 & <tag>"), "doc@P1": export.NoteHead("", part=True)},
    )
    nodes, edges, _ = parse_graphml(export.graphml(rows))
    assert nodes["note:n"]["summary"] == "bell \ufffd & <tag>"
    assert nodes["person:bo"] == {"type": "entity", "kind": "person"}
    assert nodes["note:doc@P1"]["part"] == "true" and len(edges) == 3


@pytest.fixture
async def scoped_world(client, make_tenant, make_pipeline):
    tenant = await make_tenant()
    owner = tenant.project("graph-scoped")
    for body in (
        {"id": "alice-1", "content": "Alice Walker met Carol Jones in Paris.",
         "tags": {"user": "alice", "topic": "river"}},
        {"id": "bob-1", "content": "Bob Zebracorn sailed to Lisbon with Dave Miller.",
         "tags": {"user": "bob", "topic": "quillfeather"}},
    ):  # fmt: skip
        r = await client.post("/v1/notes", headers=owner, json=body)
        assert r.status_code == 200, r.text
    pipeline = make_pipeline()
    for _ in range(4):
        r = await client.get("/v1/jobs", headers=owner, params={"status": "pending"})
        pending = r.json()["jobs"]
        if not pending:
            break
        for job in reversed(pending):
            await run_job(pipeline, tenant, job["id"])
    r = await client.post(
        "/v1/subkeys",
        headers=owner,
        json={"name": "alice", "tags": {"user": "alice"}, "expires_in_seconds": 3600,
              "scopes": ["read"]},
    )  # fmt: skip
    assert r.status_code == 201, r.text
    return owner, {"Authorization": f"Bearer {r.json()['key']}"}


async def test_a_tag_scoped_key_exports_only_its_notes(client, scoped_world) -> None:
    owner, alice = scoped_world
    everything = (await get(client, owner, "/v1/graph/export")).text
    assert "quillfeather" in everything and "Zebracorn" in everything  # the owner sees bob's
    body = (await get(client, alice, "/v1/graph/export")).content
    for secret in (b"quillfeather", b"bob-1", b"Zebracorn", b"Lisbon", b"Dave Miller"):
        assert secret not in body, secret
    nodes, _, _ = parse_graphml(body)
    assert {k for k, v in nodes.items() if v["type"] == "topic"} == {"topic:river"}
    assert {k for k, v in nodes.items() if v["type"] == "note"} == {"note:alice-1"}
    _, topics = await csv_table(client, alice, "topics")
    assert topics == [["river", "river", "alice-1"]]
    _, mentions = await csv_table(client, alice, "mentions")
    assert mentions and {row[0] for row in mentions} == {"alice-1"}
    _, entities = await csv_table(client, alice, "entities")
    assert "person:dave miller" not in {row[0] for row in entities}
    mine = (await get(client, alice, "/v1/graph/stats")).json()
    theirs = (await get(client, owner, "/v1/graph/stats")).json()
    assert mine["topics"] == 1 and theirs["topics"] == 2
    assert mine["notes_with_mentions"] == 1 and theirs["notes_with_mentions"] == 2
    assert "person:dave miller" not in {e["key"] for e in mine["top_entities"]}
