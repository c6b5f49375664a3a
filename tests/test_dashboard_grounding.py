"""A note's passages and citations on the dashboard, in headless Chromium
against keepmem served by uvicorn: a PDF of several pages uploaded to a
project that keeps text and cut into passages by the worker; the note page
lists each passage with its number, span and pages, and the note's
citation; Verify says "valid", then "changed" after the document is
uploaded again with the cited sentence edited."""

from __future__ import annotations

import json

import httpx

from tests import documents_kit as kit
from tests.browser import Browser
from tests.test_dashboard import browser, clean_console, live  # noqa: F401
from tests.test_grounding_documents import work

QUOTE_PAGE = 3
DASH = "\u2013"  # the page writes ranges with an en dash


def upload(url: str, headers: dict[str, str], pages: list[list[str]], note_id: str) -> dict:
    r = httpx.post(
        f"{url}/v1/upload",
        files={"file": ("report.pdf", kit.pdf(pages), "application/pdf")},
        data={"id": note_id, "tags": json.dumps({"kind": "report"})},
        headers=headers,
        timeout=30,
    )
    assert r.status_code == 200, r.text
    return dict(r.json())


def passage_rows(b: Browser) -> list[dict[str, str]]:
    """The passages table as shown (read in one step: the page may redraw)."""
    found = b.run(
        """return [...document.querySelectorAll('#passages tbody tr')].map(r => ({
             id: r.dataset.id, num: r.cells[0].innerText.trim(),
             span: r.cells[1].innerText.trim(), where: r.cells[2].innerText.trim()}))"""
    )
    return list(found)


async def test_note_page_lists_passages_with_pages_and_verifies_a_citation(
    browser: Browser,  # noqa: F811
    live: str,  # noqa: F811
    tenant,
    client,
    make_pipeline,
) -> None:
    b = browser
    headers = tenant.headers
    r = httpx.patch(f"{live}/v1/settings", json={"keep_text": True}, headers=headers)
    assert r.status_code == 200, r.text
    pages = kit.report(pages=8)
    quote = pages[QUOTE_PAGE - 1][3]
    note = upload(live, headers, pages, "parish-report")
    await work(make_pipeline(), client, tenant)

    parts = httpx.get(f"{live}/v1/notes/parish-report/parts", headers=headers).json()["parts"]
    assert len(parts) > 2 and all("_page" in p["tags"] for p in parts)
    r = httpx.post(
        f"{live}/v1/citations", json={"note": note["id"], "quote": quote}, headers=headers
    )
    assert r.status_code == 200, r.text
    cited = r.json()
    assert cited["locator"]["page"] == QUOTE_PAGE

    b.sign_in(tenant.key)
    b.go("#/note?id=parish-report")
    b.until(lambda d: len(passage_rows(b)) == len(parts), "the passages")
    shown = {row["id"]: row for row in passage_rows(b)}
    for p in parts:
        row, tags = shown[p["id"]], p["tags"]
        assert row["num"] == tags["_part_num"]
        assert row["span"] == f"{tags['_span_start']}{DASH}{tags['_span_end']}"
        first, last = tags["_page"], tags.get("_page_end")
        assert row["where"] == (f"page {first}{DASH}{last}" if last else f"page {first}")
    assert b.text("#parts-title") == f"Passages ({len(parts)})"

    row = f'#citations tr[data-id="{cited["id"]}"]'
    b.find(row)
    assert quote in b.text(f"{row} td.quote")
    assert f"page {QUOTE_PAGE}" in b.text(f"{row} td.where")
    assert b.text(f"{row} td.status") == "not checked"
    b.find(f"{row} button.verify").click()
    b.until(lambda d: b.text(f"{row} td.status") == "valid", "the verdict")
    b.shot("grounding-note-passages-and-citation")
    assert b.unlabelled() == []

    # the document again, the cited sentence edited: the same page says changed
    edited = [list(lines) for lines in pages]
    edited[QUOTE_PAGE - 1][3] = quote.replace(quote.split()[-1], "yesterday.")
    upload(live, headers, edited, "parish-report")
    b.find(f"{row} button.verify").click()
    b.until(lambda d: b.text(f"{row} td.status").startswith("changed: "), "the new verdict")
    assert "no longer" in b.text(f"{row} td.status")
    b.shot("grounding-citation-changed")
