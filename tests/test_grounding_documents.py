"""Long real-world-shaped documents, uploaded: a 60-page report PDF with
headings and tables, the same as DOCX, a slide deck, a workbook and
subtitles. A sentence from page 50 is found by meaning and by its words,
with a citation whose quote and span match the stored text and whose
locator names the page (slide, sheet, cue time); verify says valid, then
changed once the document is uploaded again with that sentence edited."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests import documents_kit as kit
from tests.conftest import Tenant
from tests.test_pipeline import jobs_of, run_job

WORK = ("embed", "summarize", "chunk")
FORMATS: dict[str, tuple[str, str, Callable[[list[list[str]]], bytes]]] = {
    "pdf": ("report.pdf", "application/pdf", kit.pdf),
    "docx": ("report.docx", "application/octet-stream", kit.docx),
    "pptx": ("deck.pptx", "application/octet-stream", kit.pptx),
    "xlsx": ("book.xlsx", "application/octet-stream", kit.xlsx),
    "srt": ("talk.srt", "text/plain", kit.srt),
}


async def work(pipeline, client: httpx.AsyncClient, t: Tenant) -> None:
    """Run the tenant's pending embedding, summary and chunk jobs."""
    for _ in range(3):
        pending = [j for j in await jobs_of(client, t, status="pending") if j["kind"] in WORK]
        if not pending:
            return
        for job in reversed(pending):
            assert await run_job(pipeline, t, job["id"]) == "done", job


async def upload(
    client: httpx.AsyncClient, t: Tenant, fmt: str, pages: list[list[str]], note_id: str
) -> dict[str, Any]:
    name, ctype, make = FORMATS[fmt]
    r = await client.post(
        "/v1/upload",
        files={"file": (name, make(pages), ctype)},
        data={"id": note_id, "tags": json.dumps({"kind": "report"})},
        headers=t.headers,
    )
    assert r.status_code == 200, r.text
    return dict(r.json())


async def find(client: httpx.AsyncClient, t: Tenant, query: str, stages: str) -> list[dict]:
    r = await client.post(
        "/v1/search",
        json={"query": query, "limit": 5, "stages": stages, "cite": True, "per_document": 3},
        headers=t.headers,
    )
    assert r.status_code == 200, r.text
    return list(r.json()["notes"])


def where_expected(fmt: str) -> dict[str, Any]:
    """What the needle's citation locator says, per format."""
    return {
        "pdf": {"page": kit.NEEDLE_PAGE},
        "pptx": {"slide": kit.NEEDLE_PAGE},
        "xlsx": {"sheet": f"Chapter {kit.NEEDLE_PAGE}"},
        "docx": {},
        "srt": {},
    }[fmt]


@pytest.mark.parametrize("fmt", list(FORMATS))
async def test_a_sentence_deep_in_a_long_document_is_found_cited_and_verified(
    fmt: str, client, tenant, make_pipeline
) -> None:
    pipeline = make_pipeline()
    r = await client.patch("/v1/settings", json={"keep_text": True}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    pages = kit.report()
    await upload(client, tenant, fmt, pages, "doc")
    await work(pipeline, client, tenant)
    parts = (await client.get("/v1/notes/doc/parts", headers=tenant.headers)).json()["parts"]
    assert len(parts) > 20, "a long document becomes many passages"

    cited = None
    for query, stages in (
        ("ferryman niece rebuilt tide clock sewing machine", "text"),  # by its words
        ("a young woman repaired a clock for the tides using an old sewing machine", "vector"),
    ):
        hits = await find(client, tenant, query, stages)
        holding = [h for h in hits if h["citation"] and kit.NEEDLE in h["citation"]["quote"]]
        assert holding, (fmt, stages, [(h["id"], h["summary"]) for h in hits])
        cited = holding[0]["citation"]
        assert holding[0]["id"].startswith("doc@P{")
        for key, value in where_expected(fmt).items():
            assert cited["locator"].get(key) == value or (
                key in ("page", "slide")
                and cited["locator"].get(key, 0)
                <= value
                <= cited["locator"].get(f"{key}_end", cited["locator"].get(key))
            ), (fmt, cited["locator"])
        if fmt == "srt":
            assert cited["locator"]["start_s"] < cited["locator"]["end_s"]
    assert cited is not None

    # the quote and span match the stored source text
    r = await client.post(
        "/v1/citations", json={"note": "doc", "quote": kit.NEEDLE}, headers=tenant.headers
    )
    assert r.status_code == 200, r.text
    citation = r.json()
    assert citation["quote"] == kit.NEEDLE
    whole = await client.post(
        "/v1/citations",
        json={"note": "doc", "start": cited["start"], "end": cited["end"]},
        headers=tenant.headers,
    )
    assert whole.status_code == 200, whole.text
    assert whole.json()["quote"] == cited["quote"], "find's citation is the stored text's span"
    assert citation["start"] >= cited["start"] - 2000
    r = await client.post(f"/v1/citations/{citation['id']}/verify", headers=tenant.headers)
    assert r.json()["status"] == "valid", r.text

    # uploaded again with that sentence edited
    await upload(client, tenant, fmt, kit.report(needle=kit.NEEDLE_EDITED), "doc")
    r = await client.post(f"/v1/citations/{citation['id']}/verify", headers=tenant.headers)
    verdict = r.json()
    assert verdict["status"] == "changed" and not verdict["quote_in_place"], verdict
    assert "no longer" in verdict["diagnosis"]
