"""Grounding: a long note is cut into passages (parts with spans, vectors
and full text) and found by any of them; a project that keeps text can cite
a passage or a span, verify it (valid, changed, gone) and open it; find
cites its results and spreads them over documents."""

from __future__ import annotations

import itertools
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from app.grounding import chunking
from app.kit.spans import Segment
from tests.conftest import Tenant
from tests.test_pipeline import jobs_of, run_all
from tests.test_search import _adds_up

TOPICS = [
    ("harbour", "The harbour master logs every ship that enters after dusk."),
    ("orchard", "Apple trees in the north orchard are pruned in late winter."),
    ("library", "The reading room closes an hour early on public holidays."),
    ("bakery", "Rye loaves rise overnight in the cool cellar of the bakery."),
    ("observatory", "The observatory dome turns on a ring of forty steel wheels."),
    ("vineyard", "Grapes on the south slope are picked by hand in October."),
    ("railway", "The branch line to the quarry was closed in nineteen sixty."),
    ("museum", "A bronze astrolabe is the oldest object in the museum."),
]
NEEDLE = (
    "The lighthouse keeper's daughter repaired the fog horn with a bicycle chain "
    "during the storm of the long winter."
)


def long_text(sections: int = 40, needle_at: int = 33) -> str:
    """A report of many sections, each about one topic; the needle sentence in one."""
    out = []
    for i in range(sections):
        name, line = TOPICS[i % len(TOPICS)]
        body = [f"Section {i + 1}: the {name}.", line]
        body += [
            f"Visitor number {i * 7 + k} asked about the {name} and was shown the records "
            f"of year {1900 + i * 3 + k}."
            for k in range(4)
        ]
        if i == needle_at:
            body.insert(2, NEEDLE)
        out.append(" ".join(body))
    return "\n\n".join(out)


def path(note_id: str) -> str:
    return "/v1/notes/" + quote(note_id, safe="")


async def settings(client: httpx.AsyncClient, t: Tenant, **values: Any) -> None:
    r = await client.patch("/v1/settings", json=values, headers=t.headers)
    assert r.status_code == 200, r.text


async def work(pipeline, client: httpx.AsyncClient, t: Tenant) -> None:
    for _ in range(3):
        if not await jobs_of(client, t, status="pending"):
            return
        await run_all(pipeline, client, t)


async def put(client: httpx.AsyncClient, t: Tenant, **body: Any) -> dict[str, Any]:
    r = await client.post("/v1/notes", json=body, headers=t.headers)
    assert r.status_code == 200, r.text
    return dict(r.json())


async def parts(client: httpx.AsyncClient, t: Tenant, note_id: str) -> list[dict[str, Any]]:
    r = await client.get(path(note_id) + "/parts", headers=t.headers)
    assert r.status_code == 200, r.text
    return list(r.json()["parts"])


def test_passages_cover_the_text_with_overlap_inside_the_window() -> None:
    text = long_text()
    found = chunking.passages(text, size=200, overlap=50)
    assert len(found) > 5
    assert found[0].start == 0 and found[-1].end == len(text.rstrip())
    for before, after in itertools.pairwise(found):
        assert after.start < before.end, "consecutive passages overlap"
        assert after.start > before.start
    for p in found:
        assert p.text == text[p.start : p.end]
        assert chunking.count_tokens(p.text) <= 200
    # a sentence cut at one passage's end is whole in the next
    assert any(NEEDLE in p.text for p in found)


def test_hard_segments_bound_passages_and_locators_name_pages() -> None:
    sheet_a = "Sheet: A\n" + "alpha beta gamma delta. " * 150
    sheet_b = "Sheet: B\n" + "one two three four. " * 150
    text = sheet_a + "\n" + sheet_b
    b_start = len(sheet_a) + 1
    segments = [Segment(0, {"sheet": "A"}, True), Segment(b_start, {"sheet": "B"}, True)]
    found = chunking.passages(text, segments, size=100, overlap=20)
    for p in found:
        assert p.end <= b_start or p.start >= b_start, "no passage crosses a sheet"
        assert p.locator["sheet"] == ("A" if p.start < b_start else "B")
    pages = [Segment(0, {"page": 1}), Segment(len(text) // 2, {"page": 2})]
    found = chunking.passages(text, pages, size=100, overlap=25)
    across = [p for p in found if "page_end" in p.locator]
    assert across and across[0].locator == {"page": 1, "page_end": 2}


def test_passage_size_is_bounded_by_the_model_window() -> None:
    with pytest.raises(ValueError):
        chunking.passages("x " * 1000, size=300)


async def test_long_note_becomes_passages_found_by_meaning_and_words(
    client, tenant, make_pipeline
) -> None:
    pipeline = make_pipeline()
    text = long_text()
    await put(client, tenant, id="report", content=text)
    short = await put(client, tenant, id="short", content="A short note about the harbour.")
    assert "chunk" not in short["pending"]
    for i, (name, line) in enumerate(TOPICS):
        await put(client, tenant, id=f"note-{i}", content=f"On the {name}: {line}")
    await work(pipeline, client, tenant)
    found = await parts(client, tenant, "report")
    assert len(found) > 5
    spans = [(int(p["tags"]["_span_start"]), int(p["tags"]["_span_end"])) for p in found]
    assert spans == sorted(spans) and spans[0][0] == 0
    assert all(p["id"].startswith("report@P{") for p in found)
    assert await parts(client, tenant, "short") == []
    done = [j for j in await jobs_of(client, tenant, kind="chunk") if j["status"] == "done"]
    assert done and done[0]["result"]["passages"] == len(found)
    for query, stages in (
        ("the daughter of the lighthouse keeper fixed the fog horn during a storm", "vector"),
        ("lighthouse keeper daughter bicycle chain", "text"),
        ("who repaired the fog horn of the lighthouse with a bicycle chain?", "hybrid"),
    ):
        r = await client.post(
            "/v1/search",
            json={"query": query, "limit": 5, "stages": stages},
            headers=tenant.headers,
        )
        assert r.status_code == 200, r.text
        holding = [
            n["id"]
            for n in r.json()["notes"]
            if n["id"].startswith("report@P{")
            and NEEDLE in text[int(n["tags"]["_span_start"]) : int(n["tags"]["_span_end"])]
        ]
        assert holding, (query, [n["id"] for n in r.json()["notes"]])
    # shown in its document's place, a passage's explanation still adds up to its score
    r = await client.post(
        "/v1/search",
        json={"query": "keeper daughter fog horn bicycle chain storm", "explain": True},
        headers=tenant.headers,
    )
    shown = r.json()["notes"]
    assert not {"report"} & {n["id"] for n in shown}, "the document stands aside for its passage"
    for n in shown:
        _adds_up(n)


async def test_citation_create_verify_change_and_open(client, tenant, make_pipeline) -> None:
    pipeline = make_pipeline()
    await settings(client, tenant, keep_text=True)
    text = long_text()
    await put(client, tenant, id="report", content=text)
    await work(pipeline, client, tenant)
    r = await client.post(
        "/v1/search",
        json={"query": "fog horn repaired with a bicycle chain", "limit": 3, "cite": True},
        headers=tenant.headers,
    )
    assert r.status_code == 200, r.text
    hit = r.json()["notes"][0]
    cited = hit["citation"]
    assert cited["stored"] is False and cited["quote"] == text[cited["start"] : cited["end"]]
    assert NEEDLE in cited["quote"] or cited["quote"] in text
    # store a citation of the needle itself, by its quote
    r = await client.post(
        "/v1/citations", json={"note": "report", "quote": NEEDLE}, headers=tenant.headers
    )
    assert r.status_code == 200, r.text
    c = r.json()
    start = text.index(NEEDLE)
    assert (c["start"], c["end"], c["quote"]) == (start, start + len(NEEDLE), NEEDLE)
    assert c["before"] == text[max(0, start - 200) : start] and c["version"] == 1
    import hashlib

    assert c["text_sha256"] == hashlib.sha256(text.encode()).hexdigest()
    again = await client.post(
        "/v1/citations",
        json={"note": "report", "start": start, "end": start + len(NEEDLE)},
        headers=tenant.headers,
    )
    assert again.json()["id"] == c["id"], "the same span of the same text is one citation"
    r = await client.post(f"/v1/citations/{c['id']}/verify", headers=tenant.headers)
    assert r.json()["status"] == "valid", r.text
    r = await client.get(f"/v1/citations/{c['id']}/open", headers=tenant.headers)
    assert r.status_code == 200 and f"<mark>{NEEDLE}</mark>" in r.text.replace("&#x27;", "'")
    r = await client.get(f"/v1/citations/{c['id']}/open?format=text", headers=tenant.headers)
    assert f"[[{NEEDLE}]]" in r.text and r.headers["X-Citation-Status"] == "valid"
    # the document again, the sentence edited
    edited = text.replace("bicycle chain", "length of rope")
    await put(client, tenant, id="report", content=edited)
    r = await client.post(f"/v1/citations/{c['id']}/verify", headers=tenant.headers)
    v = r.json()
    assert v["status"] == "changed" and v["quote_in_place"] is False
    assert "no longer" in v["diagnosis"] and v["current_version"] == 2
    # edited elsewhere only: changed, the quote still at its span
    r = await client.post(
        "/v1/citations/verify",
        json={**{k: c[k] for k in ("note", "start", "end", "quote")}, "text_sha256": "0" * 64},
        headers=tenant.headers,
    )
    assert r.json()["status"] == "changed"
    await put(client, tenant, id="report", content=text)
    r = await client.post(f"/v1/citations/{c['id']}/verify", headers=tenant.headers)
    assert r.json()["status"] == "valid", "the cited text is back"
    listed = await client.get("/v1/citations?note=report", headers=tenant.headers)
    assert [x["id"] for x in listed.json()["citations"]] == [c["id"]]
    assert (await client.delete(path("report"), headers=tenant.headers)).status_code == 200
    r = await client.post(f"/v1/citations/{c['id']}/verify", headers=tenant.headers)
    assert r.json()["status"] == "gone"
    kept = (await client.get(f"/v1/citations/{c['id']}", headers=tenant.headers)).json()
    assert (kept["quote"], kept["before"], kept["after"]) == ("", "", ""), "no words left"
    assert kept["text_sha256"] == c["text_sha256"] and kept["start"] == c["start"]


async def test_bad_citations_are_refused_and_nothing_stored(client, tenant, other_tenant) -> None:
    await settings(client, tenant, keep_text=True)
    text = long_text(sections=3, needle_at=1)
    await put(client, tenant, id="doc", content=text)
    cases = [
        ({"note": "doc", "start": 10, "end": len(text) + 5}, 400, "outside"),
        ({"note": "doc", "start": 30, "end": 10}, 400, "outside"),
        ({"note": "doc", "start": 0, "end": 5, "quote": "wrong"}, 400, "does not match"),
        ({"note": "doc", "quote": "not in the text at all"}, 400, "does not occur"),
        ({"note": "doc", "part": 1}, 404, "part"),
        ({"note": "nope", "start": 0, "end": 5}, 404, "not found"),
        ({"note": "doc"}, 400, "cite a part"),
    ]
    for body, status, words in cases:
        r = await client.post("/v1/citations", json=body, headers=tenant.headers)
        assert r.status_code == status, (body, r.text)
        assert words in r.json()["error"], r.text
    r = await client.post(
        "/v1/citations", json={"note": "doc", "start": 0, "end": 5}, headers=other_tenant.headers
    )
    assert r.status_code == 404, "another tenant's note is not there"
    listed = await client.get("/v1/citations", headers=tenant.headers)
    assert listed.json()["citations"] == []
    given = {"start": 0, "end": 5, "quote": text[:5], "text_sha256": "0" * 64}
    for note, end in (("\u0000bad", 5), ("doc", 0)):
        r = await client.post(
            "/v1/citations/verify", json={**given, "note": note, "end": end}, headers=tenant.headers
        )
        assert r.status_code == 400, r.text
    # an earlier version found by find cites nothing: its text is not kept
    await put(client, tenant, id="doc", content=text.replace("harbour", "haven"))
    r = await client.post(
        "/v1/search",
        json={"query": "harbour", "cite": True, "include_versions": True, "stages": "text"},
        headers=tenant.headers,
    )
    found = {n["id"]: n["citation"] for n in r.json()["notes"]}
    assert found.get("doc@V{1}", "missing") is None, found
    # without kept text: a clear 409, and find says why it cites nothing
    await put(client, other_tenant, id="doc", content=text)
    r = await client.post(
        "/v1/citations", json={"note": "doc", "start": 0, "end": 5}, headers=other_tenant.headers
    )
    assert r.status_code == 409 and r.json()["code"] == "text_not_kept"
    r = await client.post(
        "/v1/search", json={"query": "harbour", "cite": True}, headers=other_tenant.headers
    )
    assert r.json()["notes"][0]["citation"] is None and "keep_text" in r.json()["citation_warning"]


async def test_per_document_spreads_results_over_documents(client, tenant, make_pipeline) -> None:
    pipeline = make_pipeline()
    await put(client, tenant, id="big", content=long_text())
    for i, (name, line) in enumerate(TOPICS[:4]):
        await put(client, tenant, id=f"small-{i}", content=f"About the {name}. {line}")
    await work(pipeline, client, tenant)
    query = {"query": "visitors asked about the records of the harbour", "limit": 6}
    r = await client.post("/v1/search", json=query, headers=tenant.headers)
    ids = [n["id"] for n in r.json()["notes"]]
    assert sum(i.startswith("big") for i in ids) > 2
    r = await client.post("/v1/search", json=query | {"per_document": 2}, headers=tenant.headers)
    capped = [n["id"] for n in r.json()["notes"]]
    assert sum(i.startswith("big") for i in capped) <= 2 and len(capped) == 6


async def test_kept_text_is_counted_and_erased_with_the_note(
    client, tenant, other_tenant, make_pipeline, db
) -> None:
    """The same document in two tenants, one keeping text: after the pipeline
    lets the held content go, the keeping tenant stores the compressed text
    more; deleting the note erases it."""
    from sqlalchemy import text as sql

    from app import tenancy

    async def stored_bytes(t: Tenant) -> int:
        r = await client.get("/v1/usage", headers=t.headers)
        assert r.status_code == 200, r.text
        return int(r.json()["bytes"])

    async def kept_rows() -> int:
        async with tenancy.tenant_id_transaction(db, tenant.id) as s:
            return int(await s.scalar(sql("SELECT count(*) FROM note_texts")) or 0)

    pipeline = make_pipeline()
    await settings(client, tenant, keep_text=True)
    for t in (tenant, other_tenant):
        await put(client, t, id="doc", content=long_text())
        await work(pipeline, client, t)
    assert await kept_rows() == 1
    extra = await stored_bytes(tenant) - await stored_bytes(other_tenant)
    assert 0 < extra < len(long_text()) // 2, "compressed text counted"
    assert (await client.delete(path("doc"), headers=tenant.headers)).status_code == 200
    assert await kept_rows() == 0


async def test_rechunk_queues_kept_notes_through_the_pipeline(
    client, tenant, make_pipeline
) -> None:
    pipeline = make_pipeline()
    await settings(client, tenant, keep_text=True)
    await put(client, tenant, id="kept", content=long_text())
    await work(pipeline, client, tenant)
    first = await parts(client, tenant, "kept")
    r = await client.post("/v1/passages/rechunk", json={}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    assert r.json() == {"queued": 1, "without_text": 0, "next_after": None}
    await work(make_pipeline(passage_tokens=120, passage_overlap=30), client, tenant)
    again = await parts(client, tenant, "kept")
    assert len(again) > len(first), "cut again, smaller, from the kept text"


def test_graph_windows_cover_a_long_text_and_spans_point_into_it() -> None:
    from app.providers.graph.base import Entity, Extraction, Relation, merged, windows

    text = ("Alice met Bob in Paris. " * 40 + "\n\n") * 200
    cut = windows(text, size=10_000)
    assert cut[0][0] == 0 and cut[-1][1] == len(text)
    assert all(b == c for (_, b), (c, _) in itertools.pairwise(cut))
    assert all(b - a <= 10_000 for a, b in cut)
    one = Extraction([Entity("Alice", "person", 0, 5), Entity("Bob", "person", 10, 13)])
    one.relations.append(Relation(0, "met", 1, 0, 23))
    both = merged([(0, one), (cut[1][0], one)])
    assert [text[e.start : e.end] for e in both.entities] == ["Alice", "Bob"] * 2
    assert both.relations[1].subject == 2 and both.relations[1].start == cut[1][0]


async def test_admin_rechunk_command_queues_every_project(client, tenant, stack) -> None:
    """`keepmem admin rechunk <tenant>`: each project's long notes with text
    go to the worker again; those without text are counted, not lost."""
    import json
    import subprocess

    from tests.conftest import SECRET
    from tests.upstack import CLI, clean_env

    await settings(client, tenant, keep_text=True)
    await put(client, tenant, id="kept", content=long_text())
    other = tenant.project("second")
    r = await client.post("/v1/notes", json={"id": "held", "content": long_text()}, headers=other)
    assert r.status_code == 200, r.text
    env = {**clean_env(), "KEEPMEM_DATABASE_URL": stack.app_url, "KEEPMEM_SECRET_KEY": SECRET}
    done = subprocess.run(
        [*CLI, "admin", "rechunk", tenant.name],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    counts = json.loads(done.stdout)
    assert counts["default"]["queued"] == 1 and counts["second"]["queued"] == 1
    one = subprocess.run(
        [*CLI, "admin", "rechunk", tenant.name, "--project", "second"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert list(json.loads(one.stdout)) == ["second"]


def test_a_passage_takes_its_documents_place_score_and_explanation() -> None:
    from app.search import ranking
    from app.search.spread import passages_stand_for_notes as _passages_stand_for_notes

    doc, other, passage, later = (
        ("d", "note", 0),
        ("x", "note", 0),
        ("d", "part", 3),
        ("d", "part", 7),
    )
    why = {k: ranking.Explained(bm25=None, text=0.0, vector=0.1, relevance=r) for k, r in (
        (doc, 0.9), (other, 0.8), (passage, 0.5), (later, 0.4))}  # fmt: skip
    scored = [(doc, 0.9), (other, 0.8), (passage, 0.5), (later, 0.4)]
    out = _passages_stand_for_notes(scored, why, {passage, later})
    assert out == [(passage, 0.9), (other, 0.8), (later, 0.4)]
    assert why[passage].relevance == 0.9, "the score shown is explained by the document's"
    # a passage already above its document: the document just stands aside
    assert _passages_stand_for_notes([(passage, 0.9), (doc, 0.5)], None, {passage}) == [
        (passage, 0.9)
    ]
    # analyze's parts (not passages) stay beside their note, as keep shows them
    assert _passages_stand_for_notes(scored, None, set()) == scored


async def test_text_put_again_is_kept_once_the_project_keeps_text(client, tenant) -> None:
    """The 409's advice holds: turn keep_text on, put the document again
    (the same text: no new version) and it can be cited."""
    text = long_text(sections=3, needle_at=1)
    await put(client, tenant, id="doc", content=text)
    cite = {"note": "doc", "quote": NEEDLE}
    r = await client.post("/v1/citations", json=cite, headers=tenant.headers)
    assert r.status_code == 409 and "put the document again" in r.json()["error"]
    await settings(client, tenant, keep_text=True)
    again = await put(client, tenant, id="doc", content=text)
    assert again["changed"] is False, "the same text: no new version"
    r = await client.post("/v1/citations", json=cite, headers=tenant.headers)
    assert r.status_code == 200 and r.json()["quote"] == NEEDLE and r.json()["version"] == 1
