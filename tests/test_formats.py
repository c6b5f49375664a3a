"""Readers say where their text came from: a PDF's pages, a deck's slides, a
workbook's sheets, a subtitle file's cues, each a segment whose offset points
at its text in the note as stored (after tidying and sanitising). XLSX, SRT
and WebVTT are read; uploads without an id are named by their content."""

from __future__ import annotations

import datetime
import hashlib
import io
import zipfile
from urllib.parse import quote

import pytest

from app.ingest import documents
from app.ingest import extract as ex
from app.kit.spans import Segment
from tests import docs
from tests.test_pipeline import jobs_of, run_all

AWS_KEY = "AKIAIOSFODNN7EXAMPLQ"


def pdf_of(pages: list[list[str]], *, title: str = "Pages", author: str = "Tests") -> bytes:
    """A PDF with a text layer (Helvetica), a page per list of lines."""
    return docs.pages_pdf(pages, title=title, author=author)


def xlsx_file() -> bytes:
    import openpyxl

    book = openpyxl.Workbook()
    budget = book.active
    budget.title = "Budget"
    budget.append(["Item", "Cost", "Bought"])
    budget.append(["Kayak", 1200.0, datetime.date(2024, 5, 1)])
    budget.append([None, None, None])  # an empty row: no line
    budget.append(["Paddle", 85.5, None])
    crew = book.create_sheet("Crew")
    crew.append(["Name", "Role"])
    crew.append(["Ana", "skipper\nand cook"])
    crew["D5"] = "late note"
    book.properties.title = "Expedition"
    book.properties.creator = "Bo"
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def pptx_three() -> bytes:
    return docs.pptx_file(
        title="Plan",
        author="Cy",
        slides=[("Kayaks", "Ship the kayak"), ("Paddles", "Carbon paddles"), ("Tents", "Pitch")],
    )


def slices(text: str, segments: list[Segment]) -> list[str]:
    """Each segment's stretch of the text."""
    ends = [s.start for s in segments[1:]] + [len(text)]
    return [text[s.start : end] for s, end in zip(segments, ends, strict=True)]


# -- readers -------------------------------------------------------------------------


def test_pdf_pages_are_segments_at_their_text() -> None:
    pages = [
        ["Harbour dues rose in March", "Fees  were   paid"],
        ["The lighthouse keeper retired", "A new lamp was fitted"],
        ["Ferries run hourly in summer"],
    ]
    got = ex.extract(pdf_of(pages), "application/pdf")
    assert got.tags["pages"] == "3" and got.tags["title"] == "Pages"
    assert [s.where for s in got.segments] == [{"page": 1}, {"page": 2}, {"page": 3}]
    parts = slices(got.text, got.segments)
    assert parts[0] == "Harbour dues rose in March\nFees were paid\n\n"  # tidied per page
    assert parts[1] == "The lighthouse keeper retired\nA new lamp was fitted\n\n"
    assert parts[2] == "Ferries run hourly in summer"


def two_text_pages_around_a_scan() -> bytes:
    import pypdf

    writer = pypdf.PdfWriter()
    writer.append(pypdf.PdfReader(io.BytesIO(pdf_of([["Page one speaks of harbours"]]))))
    writer.append(pypdf.PdfReader(io.BytesIO(docs.scanned_pdf(["Lease for Flat 12"]))))
    writer.append(pypdf.PdfReader(io.BytesIO(pdf_of([["Page three speaks of ferries"]]))))
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_a_scanned_page_goes_to_ocr_and_keeps_the_page_numbers() -> None:
    got = ex.extract(two_text_pages_around_a_scan(), "application/pdf")
    assert len(got.images) == 1
    assert [s.where for s in got.segments] == [{"page": 1}, {"page": 3}]
    assert slices(got.text, got.segments) == [
        "Page one speaks of harbours\n\n",
        "Page three speaks of ferries",
    ]


def test_pptx_slides_are_segments() -> None:
    got = ex.extract(pptx_three(), ex.PPTX)
    assert got.tags["slides"] == "3"
    assert [s.where for s in got.segments] == [{"slide": 1}, {"slide": 2}, {"slide": 3}]
    assert slices(got.text, got.segments) == [
        "Slide 1\nKayaks\nShip the kayak\n\n",
        "Slide 2\nPaddles\nCarbon paddles\n\n",
        "Slide 3\nTents\nPitch",
    ]


def test_docx_has_no_segments() -> None:
    word = docs.docx_file(title="t", author="a", paragraphs=["Hello there"], table=[["a", "b"]])
    got = ex.extract(word, ex.DOCX)
    assert got.text == "Hello there\na | b" and got.segments == []


def test_xlsx_sheets_are_hard_segments_with_a_line_per_row() -> None:
    got = ex.extract(xlsx_file(), ex.XLSX)
    assert got.text == (
        "Sheet: Budget\nItem | Cost | Bought\nKayak | 1200 | 2024-05-01\nPaddle | 85.5\n\n"
        "Sheet: Crew\nName | Role\nAna | skipper and cook\nlate note"
    )
    assert got.segments == [
        Segment(0, {"sheet": "Budget"}, True),
        Segment(got.text.index("Sheet: Crew"), {"sheet": "Crew"}, True),
    ]
    assert got.tags == {"sheets": "2", "title": "Expedition", "author": "Bo"}
    assert got.note == ""


def test_xlsx_reads_at_most_its_cell_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    # Budget's rows cost 3, 3, 1 (a row the file leaves out counts as one), then 2
    monkeypatch.setattr(ex, "MAX_WORKBOOK_CELLS", 8)
    got = ex.extract(xlsx_file(), ex.XLSX)
    assert got.text == "Sheet: Budget\nItem | Cost | Bought\nKayak | 1200 | 2024-05-01"
    assert [s.where for s in got.segments] == [{"sheet": "Budget"}]
    assert got.note == (
        "only the first 8 cells: sheet 'Budget' from row 4 on and 1 later sheet(s) left out"
    )


SRT = (
    "\ufeff1\r\n"
    "00:00:01,000 --> 00:00:04,500 X1:40 X2:600\r\n"
    "<i>Hello</i> there,\r\n"
    "<font color='red'>second</font> line\r\n"
    "\r\n"
    "2\r\n"
    "00:00:05,000 --> 00:00:0x,000\r\n"
    "a cue with a broken end time\r\n"
    "\r\n"
    "3\r\n"
    "00:00:06,000 --> 00:00:05,000\r\n"
    "a cue that ends before it starts\r\n"
    "\r\n"
    "4\r\n"
    "00:00:06,000 --> 00:00:08,000\r\n"
    "{\\an8}Fish &amp; chips\r\n"
    "5\r\n"  # no blank line before the next cue
    "01:00:00,250 --> 01:00:02,000\r\n"
    "The end"  # and none at the end of the file
)


def test_srt_cues_are_segments_with_their_times() -> None:
    got = ex.extract(SRT.encode(), ex.media_type("text/plain", "film.srt", b""))
    assert got.text == "Hello there, second line\nFish & chips\nThe end"
    assert got.segments == [
        Segment(0, {"start_s": 1.0, "end_s": 4.5}),
        Segment(25, {"start_s": 6.0, "end_s": 8.0}),
        Segment(38, {"start_s": 3600.25, "end_s": 3602.0}),
    ]
    assert slices(got.text, got.segments) == [
        "Hello there, second line\n",
        "Fish & chips\n",
        "The end",
    ]
    assert got.tags == {"cues": "3", "duration": "3602s"}
    assert got.note == "left out: 2 cue(s) with malformed times"


VTT = """WEBVTT - the crossing
Kind: captions
Language: en

NOTE the crew asked
for the names to stay

STYLE
::cue { color: yellow }

REGION
id:fred width:40%

intro
00:01.000 --> 00:03.250 align:start position:10% region:fred
<v Ana Silva>We sail at dawn</v>

00:00:04.000 --> 00:00:06.000
<v.loud Bo>Wait!
<c.yellow>Really</c> <00:00:05.000>now?

bad
00:07.000 --> 00:08
no fraction: skipped

00:09.000 --> 00:10.000
<b>Land</b> &lt;ahead&gt;
"""


def test_webvtt_cues_voices_and_blocks() -> None:
    utf16 = VTT.replace("\n", "\r\n").encode("utf-16")  # with its BOM
    got = ex.extract(utf16, ex.media_type("text/vtt", "crossing.vtt", b""))
    assert got.text == "Ana Silva: We sail at dawn\nBo: Wait! Really now?\nLand <ahead>"
    assert [s.where for s in got.segments] == [
        {"start_s": 1.0, "end_s": 3.25},
        {"start_s": 4.0, "end_s": 6.0},
        {"start_s": 9.0, "end_s": 10.0},
    ]
    assert slices(got.text, got.segments)[1] == "Bo: Wait! Really now?\n"
    assert got.tags == {"cues": "3", "duration": "10s"}


def test_a_subtitle_file_without_cues_is_unreadable() -> None:
    with pytest.raises(ex.UnreadableDocument, match="no subtitle cues found"):
        ex.extract(b"1\n00:00:01 --> 00:00:02\nno milliseconds\n", ex.SRT)


def test_media_types_of_the_new_formats() -> None:
    assert ex.media_type("text/plain", "a.SRT", b"") == ex.SRT
    assert ex.media_type("text/plain", "a.vtt", b"") == ex.VTT
    assert ex.media_type("text/plain", "a.txt", b"") == "text/plain"
    assert ex.media_type("application/octet-stream", "book.xlsx", b"PK") == ex.XLSX
    assert ex.media_type(None, "film.srt", b"") == ex.SRT
    assert ex.media_type("application/x-subrip", None, b"") == ex.SRT


# -- sanitising keeps the offsets ------------------------------------------------------


def test_sanitising_moves_the_segments_with_their_text() -> None:
    pages = ["Page one is plain.\n\n", f"Page two holds {AWS_KEY} here.\n\n", "Page three."]
    text = "".join(pages)
    starts = [0, len(pages[0]), len(pages[0]) + len(pages[1])]
    segments = [Segment(at, {"page": n}) for n, at in enumerate(starts, start=1)]
    assert slices(text, segments) == pages
    clean, moved = documents.sanitized(text, segments)
    assert AWS_KEY not in clean
    assert slices(clean, moved) == [
        "Page one is plain.\n\n",
        "Page two holds [REDACTED:aws-access-key] here.\n\n",
        "Page three.",
    ]


def test_a_private_span_over_a_page_break_is_removed_whole() -> None:
    pages = ["One <private>secret starts\n\n", "still secret</private> two\n\n", "Page three."]
    text = "".join(pages)
    starts = [0, len(pages[0]), len(pages[0]) + len(pages[1])]
    segments = [Segment(at, {"page": n}) for n, at in enumerate(starts, start=1)]
    clean, moved = documents.sanitized(text, segments)
    assert clean == "One  two\n\nPage three."  # as the whole text is cleaned
    # page 2 began inside the private span: page 1 covers what is left of it
    assert [s.where for s in moved] == [{"page": 1}, {"page": 3}]
    assert slices(clean, moved) == ["One  two\n\n", "Page three."]


def test_a_secret_across_a_page_break_is_still_redacted() -> None:
    token = "abcdefghijklmnopqrstuvwxyz0123"
    text = f"Send Authorization: Bearer\n\n{token} with it."
    clean, moved = documents.sanitized(text, [Segment(0, {"page": 1}), Segment(28, {"page": 2})])
    assert token not in clean and clean == documents.redaction.clean(text)
    assert moved == []  # no offsets it could vouch for


# -- uploads ---------------------------------------------------------------------------


@pytest.fixture
def puts(monkeypatch: pytest.MonkeyPatch) -> list:
    """What documents hand the notes domain to store (content and segments)."""
    from app.notes import service as note_service

    seen = []
    real = note_service.put

    async def spy(session, scope, *, data, **kwargs):
        seen.append(data)
        return await real(session, scope, data=data, **kwargs)

    monkeypatch.setattr(note_service, "put", spy)
    return seen


async def send(client, t, data: bytes, filename: str, content_type: str, **form):
    return await client.post(
        "/v1/upload", files={"file": (filename, data, content_type)}, data=form, headers=t.headers
    )


async def test_upload_ids_are_content_hashes(client, tenant) -> None:
    first = pdf_of([["The first report is about harbours"]])
    second = pdf_of([["The second report is about ferries"]])
    a = (await send(client, tenant, first, "report.pdf", "application/pdf")).json()
    b = (await send(client, tenant, second, "report.pdf", "application/pdf")).json()
    again = (await send(client, tenant, first, "report.pdf", "application/pdf")).json()
    assert a["id"] == "%" + hashlib.sha256(first).hexdigest()[:12]
    assert b["id"] == "%" + hashlib.sha256(second).hexdigest()[:12] != a["id"]
    assert again["id"] == a["id"]
    assert a["tags"]["filename"] == b["tags"]["filename"] == "report.pdf"
    named = await send(client, tenant, first, "report.pdf", "application/pdf", id="my-report")
    assert named.json()["id"] == "my-report"
    listed = (await client.get("/v1/notes", headers=tenant.headers)).json()["notes"]
    uploads = [n["id"] for n in listed if n["tags"].get("filename") == "report.pdf"]
    assert sorted(uploads) == sorted([a["id"], b["id"], "my-report"])  # (authors are notes too)
    got = await client.get("/v1/notes/" + quote(a["id"], safe=""), headers=tenant.headers)
    assert got.status_code == 200 and got.json()["tags"]["pages"] == "1"


async def test_uploaded_segments_reach_the_note_after_sanitising(client, tenant, puts) -> None:
    pages = [
        ["The harbour report opens"],
        ["Credentials left in it:", f"key {AWS_KEY} for the bucket"],
        ["Page three speaks of ferries"],
    ]
    r = await send(client, tenant, pdf_of(pages), "report.pdf", "application/pdf")
    assert r.status_code == 200, r.text
    (put,) = puts
    assert AWS_KEY not in put.content and "[REDACTED:aws-access-key]" in put.content
    assert [s.where for s in put.segments] == [{"page": 1}, {"page": 2}, {"page": 3}]
    assert slices(put.content, list(put.segments)) == [
        "The harbour report opens\n\n",
        "Credentials left in it:\nkey [REDACTED:aws-access-key] for the bucket\n\n",
        "Page three speaks of ferries",
    ]


async def test_xlsx_and_srt_uploads_carry_their_segments(client, tenant, puts) -> None:
    r = await send(client, tenant, xlsx_file(), "budget.xlsx", "application/octet-stream")
    assert r.status_code == 200, r.text
    assert r.json()["tags"]["sheets"] == "2" and r.json()["tags"]["_content_type"] == ex.XLSX
    r = await send(client, tenant, SRT.encode(), "film.srt", "text/plain")
    assert r.status_code == 200, r.text
    assert r.json()["tags"]["cues"] == "3" and r.json()["tags"]["_content_type"] == ex.SRT
    book, film = puts
    assert [(s.where, s.hard) for s in book.segments] == [
        ({"sheet": "Budget"}, True),
        ({"sheet": "Crew"}, True),
    ]
    assert book.content[book.segments[1].start :].startswith("Sheet: Crew\nName | Role")
    assert film.content[film.segments[2].start :] == "The end"


async def test_ocr_keeps_the_text_layer_segments(client, tenant, make_pipeline, puts) -> None:
    r = await send(client, tenant, two_text_pages_around_a_scan(), "lease.pdf", "application/pdf")
    assert r.status_code == 200 and r.json()["pending"] == ["ocr"], r.text
    assert len(await jobs_of(client, tenant, kind="ocr")) == 1
    await run_all(make_pipeline(), client, tenant, note_id=r.json()["id"])
    delivered = puts[-1]
    assert delivered.placeholder is None and "Flat 12" in delivered.content  # OCR appended
    assert [s.where for s in delivered.segments] == [{"page": 1}, {"page": 3}]
    text = delivered.content
    assert text[delivered.segments[1].start :].startswith("Page three speaks of ferries\n\n")


async def test_hostile_and_malformed_new_formats_are_refused(client, tenant) -> None:
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        z.writestr("xl/worksheets/sheet1.xml", b"0" * (300 * 2**20))
    r = await send(client, tenant, bomb.getvalue(), "bomb.xlsx", "application/octet-stream")
    assert r.status_code == 422 and "zip bomb" in r.json()["error"], r.text
    r = await send(client, tenant, b"not a workbook", "broken.xlsx", ex.XLSX)
    assert r.status_code == 422 and "not a valid Office file" in r.json()["error"], r.text
    bad = b"1\n00:00:01,000 -> 00:00:02,000\nan arrow too short\n\n2\n99:99 --> x\nworse\n"
    r = await send(client, tenant, bad, "broken.srt", "application/x-subrip")
    assert r.status_code == 422, r.text
    assert "no subtitle cues found (1 with malformed times)" in r.json()["error"]
    listed = await client.get("/v1/notes", headers=tenant.headers)
    assert listed.json()["notes"] == []  # nothing stored
