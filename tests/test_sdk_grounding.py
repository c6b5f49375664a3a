"""keepmem-client's grounding methods against the real app: a long note cut
into passages by the pipeline, found with citations and capped per
document, cited, verified (valid, then changed after an edit), opened;
errors as the SDK's classes; upload from a path, a crawl and a re-chunk. The
async client in process, the sync client over HTTP (a live server)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from keepmem_client import (
    AsyncKeepmem,
    BadRequestError,
    Citation,
    CitationVerdict,
    ConflictError,
    Distilled,
    Keepmem,
    NotFoundError,
)

from app.db import Database
from app.main import create_app
from app.settings import Settings
from tests.docserver import serving
from tests.test_grounding import NEEDLE, long_text, work
from tests.test_pipeline import jobs_of, run_job

QUERY = "who repaired the fog horn of the lighthouse with a bicycle chain?"
LOCAL = {"fetch_allow_networks": ["127.0.0.1/32"]}


@pytest.fixture
async def km(client, asgi_app, tenant) -> AsyncIterator[AsyncKeepmem]:
    transport = httpx.ASGITransport(app=asgi_app)
    async with AsyncKeepmem("http://keepmem.test", tenant.key, transport=transport) as sdk:
        yield sdk


async def test_async_find_cite_verify_and_open(km, client, tenant, make_pipeline) -> None:
    text = long_text()
    assert (await km.update_settings(keep_text=True)).keep_text is True
    await km.put(text, id="report")
    await km.put("A short note about the harbour and its ships.", id="short")
    await work(make_pipeline(), client, tenant)
    passages = await km.parts("report")
    assert len(passages) > 5 and all("_span_start" in p.tags for p in passages)

    found = await km.find(QUERY, cite=True, limit=5)
    assert found.citation_warning is None
    hit = next(n for n in found.notes if n.id.startswith("report@P{"))
    cited = hit.citation
    assert isinstance(cited, Citation) and cited.stored is False and cited.note == "report"
    assert cited.quote == text[cited.start : cited.end]
    assert str(cited.start) == hit.tags["_span_start"]
    verdict = await km.verify_citation(cited)  # not stored: checked as given
    assert isinstance(verdict, CitationVerdict) and verdict.status == "valid" and verdict.valid
    capped = await km.find("visitors asked about the records", per_document=1, limit=5)
    assert sum(n.id.startswith("report") for n in capped.notes) <= 1

    stored = await km.cite("report", quote=NEEDLE)
    start = text.index(NEEDLE)
    assert (stored.start, stored.end, stored.quote) == (start, start + len(NEEDLE), NEEDLE)
    assert stored.stored and stored.id.startswith("cit_") and stored.version == 1
    assert stored.text_sha256 == hashlib.sha256(text.encode()).hexdigest()
    again = await km.cite("report", start=start, end=start + len(NEEDLE), context_chars=20)
    assert again.id == stored.id, "the same span of the same text is one citation"
    by_part = await km.cite("report", part=int(hit.tags["_part_num"]))
    assert by_part.part == int(hit.tags["_part_num"]) and by_part.quote == cited.quote
    assert (await km.citation(stored.id)).quote == NEEDLE
    page = await km.citations("report", limit=1)
    assert len(page.citations) == 1 and page.next_cursor
    every = [c.id async for c in km.iter_citations("report", page_size=1)]
    assert sorted(every) == sorted({stored.id, by_part.id})

    assert (await km.verify_citation(stored.id)).status == "valid"
    assert (await km.verify_citation(stored)).status == "valid"
    opened = await km.open_citation(stored.id)
    assert f"[[{NEEDLE}]]" in opened
    assert "<mark>" in await km.open_citation(stored.id, format="html")

    made = await km.distill(
        [stored, {"note": "report", "part": by_part.part}],
        statement="The fog horn was once repaired with a bicycle chain.",
        subject="lighthouse",
    )
    assert isinstance(made, Distilled) and made.op == "add" and made.rendered_by == "agent"
    assert made.memory.id.startswith("mem/") and made.memory.subject == "lighthouse"
    sources = {p.target: (p.citation, p.quote) for p in made.provenance}
    assert sources["report"] == (stored.id, NEEDLE)  # a span: the note itself
    assert sources[f"report@P{{{by_part.part}}}"] == (by_part.id, by_part.quote)
    with pytest.raises(BadRequestError):  # no statement, and no model here to write one
        await km.distill([stored.id])

    await km.put(text.replace("bicycle chain", "length of rope"), id="report")
    changed = await km.verify_citation(stored.id)
    assert changed.status == "changed" and changed.quote_in_place is False
    assert changed.current_version == 2 and "no longer" in changed.diagnosis
    assert (await km.verify_citation(cited)).status == "changed"

    assert (await km.delete_citation(by_part.id))["deleted"] == by_part.id
    with pytest.raises(NotFoundError) as missing:
        await km.citation(by_part.id)
    assert missing.value.status == 404 and missing.value.code == "citation_not_found"
    with pytest.raises(BadRequestError) as outside:
        await km.cite("report", start=10, end=len(text) + 50)
    assert "outside" in outside.value.message
    assert [c.id async for c in km.iter_citations("report")] == [stored.id], "nothing stored"


async def test_async_without_kept_text_is_a_conflict(km, client, tenant, make_pipeline) -> None:
    await km.put(long_text(sections=3, needle_at=1), id="doc")
    with pytest.raises(ConflictError) as refused:
        await km.cite("doc", start=0, end=5)
    assert refused.value.status == 409 and refused.value.code == "text_not_kept"
    found = await km.find("harbour", cite=True)
    assert found.notes[0].citation is None and "keep_text" in (found.citation_warning or "")
    # kept from now on: re-chunking needs the text, which the pipeline let go
    await work(make_pipeline(), client, tenant)
    done = await km.rechunk()
    assert (done.queued, done.next_after) == (0, None)


@pytest.fixture
async def local_km(settings: Settings, db: Database, tenant) -> AsyncIterator[AsyncKeepmem]:
    """The API with loopback allowed to be fetched, so a crawl of a local
    web server may start."""
    app = create_app(settings.model_copy(update=LOCAL), db=db)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with AsyncKeepmem("http://keepmem.test", tenant.key, transport=transport) as sdk:
            yield sdk


async def test_async_crawl_stores_the_site(local_km, client, tenant, make_pipeline) -> None:
    with serving() as web:
        web.add("/", '<html><body><a href="/b.html">b</a><p>Tide tables.</p></body></html>',
                "text/html")  # fmt: skip
        web.add("/b.html", "<html><body><p>Moorings cost 12 euros.</p></body></html>",
                "text/html")  # fmt: skip
        started = await local_km.crawl(
            web.url + "/", max_depth=1, max_pages=5, max_bytes=2**20, tags={"topic": "port"}
        )
        assert started.uri == web.url + "/" and started.limits.max_pages == 5
        pipeline = make_pipeline(**LOCAL)
        for job in await jobs_of(client, tenant, kind="crawl", status="pending"):
            assert await run_job(pipeline, tenant, job["id"]) == "done"
    page = await local_km.get(web.url + "/b.html")
    assert page.tags["crawl"] == web.url + "/" and page.tags["topic"] == "port"
    with pytest.raises(BadRequestError):
        await local_km.crawl("http://169.254.169.254/latest/", max_depth=0)


async def test_sync_sdk_grounding_over_http(
    live_url, tenant, client, make_pipeline, tmp_path: Path
) -> None:
    text = long_text()
    document = tmp_path / "report.md"
    document.write_text(text)
    with Keepmem(live_url, tenant.key) as km:
        assert km.update_settings(keep_text=True).keep_text
        uploaded = km.upload(document, tags={"kind": "report"})
        assert uploaded.id == "%" + hashlib.sha256(document.read_bytes()).hexdigest()[:12]
        assert uploaded.tags["filename"] == "report.md" and uploaded.tags["kind"] == "report"
        with pytest.raises(TypeError):
            km.upload(b"bytes without a name")
        await work(make_pipeline(), client, tenant)
        found = km.find(QUERY, cite=True, per_document=2, limit=5)
        hits = [n for n in found.notes if n.id.startswith(uploaded.id + "@P{")]
        assert 0 < len(hits) <= 2 and all(n.citation is not None for n in hits)
        assert any(NEEDLE in (n.citation.quote if n.citation else "") for n in hits)
        stored = km.cite(uploaded.id, quote=NEEDLE)
        assert km.verify_citation(stored.id).status == "valid"
        assert f"[[{NEEDLE}]]" in km.open_citation(stored.id)
        assert [c.id for c in km.iter_citations(uploaded.id)] == [stored.id]
        km.upload(document.read_bytes().replace(b"bicycle chain", b"rope"), filename="x.md",
                  id=uploaded.id)  # fmt: skip
        verdict = km.verify_citation(stored)
        assert verdict.status == "changed" and not verdict.valid
        with pytest.raises(NotFoundError) as missing:
            km.verify_citation("cit_" + "0" * 20)
        assert missing.value.code == "citation_not_found"
        assert km.rechunk(limit=10).queued == 1
