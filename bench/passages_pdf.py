"""Ingest throughput of a long PDF (``bench.passages --ingest-pdf``).

A PDF of ``--pages`` pages (default 100; US Letter, Helvetica 10 pt, 48 lines
of at most 88 characters a page, ~2,000 characters, compressed streams, a text
layer) is written here from the corpus' plays, one after another, each speech
run on as a paragraph. One stack, chunking as the
server's environment says (``KEEPMEM_CHUNK_PASSAGES=true`` and, when given,
``--tokens`` / ``--overlap``); the worker warmed up first on a small upload
(model loading not timed). Then ``--runs`` times, each in a project of its
own (the same bytes would otherwise be the same note, unchanged): the upload
is posted and timed until

* embedded: the note has parts, every part has its vector, and no chunk or
  embed job of the project is open (pages/s, chars/s and passages from this);
* idle: no job of the project is open at all (graph extraction included).

The project keeps the default settings (sanitising on): what an upload
costs a user. min / median / max over the runs.
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import textwrap
import time
import zlib
from typing import Any

import httpx

from bench import passages_corpus as corpus
from bench.common import running_stack

LINES_PER_PAGE = 48
WIDTH = 88


def page_lines(docs: list[corpus.Doc], pages: int) -> list[list[str]]:
    """The corpus' text wrapped into ``pages`` pages of lines."""
    lines: list[str] = []
    need = pages * LINES_PER_PAGE
    for doc in docs:
        # speeches run on as prose (a verse line a PDF line would fill a page
        # with a third of a page's text); the speaker's name on its own line
        for block in doc.text.split("\n\n"):
            head, _, rest = block.partition("\n")
            lines += textwrap.wrap(head, WIDTH) + textwrap.wrap(rest.replace("\n", " "), WIDTH)
            if len(lines) >= need:
                break
        if len(lines) >= need:
            break
    lines = lines[:need]
    if len(lines) < need:
        raise ValueError(f"the corpus fills only {len(lines) // LINES_PER_PAGE} pages")
    return [lines[i : i + LINES_PER_PAGE] for i in range(0, need, LINES_PER_PAGE)]


def _esc(line: str) -> bytes:
    raw = line.encode("latin-1", "replace")
    return raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")


def pdf(pages: list[list[str]], title: str = "Plays") -> bytes:
    """A PDF with a real text layer: one Flate stream of text a page."""
    font = 3  # object numbers: 1 catalog, 2 pages, 3 font, 4 info, then page/content pairs
    objects: dict[int, bytes] = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
        4: b"<< /Title (" + _esc(title) + b") /Producer (keepmem bench) >>",
    }
    kids = []
    for i, lines in enumerate(pages):
        page_no, content_no = 5 + 2 * i, 6 + 2 * i
        kids.append(b"%d 0 R" % page_no)
        ops = b"BT /F1 10 Tf 14 TL 54 750 Td " + b" ".join(b"(" + _esc(t) + b") ' " for t in lines)
        stream = zlib.compress(ops + b" ET")
        objects[page_no] = (
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Contents %d 0 R /Resources << /Font << /F1 %d 0 R >> >> >>" % (content_no, font)
        )
        objects[content_no] = (
            b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream)
            + stream
            + b"\nendstream"
        )
    objects[2] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(kids), len(pages))
    out = bytearray(b"%PDF-1.4\n")
    offsets = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += b"%d 0 obj\n" % number + objects[number] + b"\nendobj\n"
    xref = len(out)
    size = max(objects) + 1
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    for number in range(1, size):
        out += b"%010d 00000 n \n" % offsets[number]
    out += b"trailer\n<< /Size %d /Root 1 0 R /Info 4 0 R >>\n" % size
    out += b"startxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


async def _upload(url: str, key: str, project: str, data: bytes, name: str) -> str:
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        r = await client.post(
            "/v1/upload",
            files={"file": (name, data, "application/pdf")},
            headers={"Authorization": f"Bearer {key}", "X-Project": project},
        )
        if r.status_code != 200:
            raise RuntimeError(f"upload: {r.status_code} {r.text[:500]}")
        note_id: str = r.json()["id"]
        return note_id


async def one_run(
    stack: Any, url: str, key: str, project: str, data: bytes, limit_s: float
) -> dict[str, Any]:
    """Upload once; seconds to embedded and to idle, and the parts made."""
    from bench.passages import OPEN, Db, job_times

    db = Db(stack)
    scope = "project_id = (SELECT id FROM projects WHERE slug = :p)"
    try:
        t0 = time.perf_counter()
        note_id = await _upload(url, key, project, data, "bench-pages.pdf")
        t_upload = time.perf_counter()
        deadline = time.monotonic() + limit_s
        t_embedded = None
        while time.monotonic() < deadline:
            (parts, vectors, busy, open_jobs), *_ = await db.rows(
                f"SELECT (SELECT count(*) FROM parts WHERE {scope} AND note_id = :n), "
                f"(SELECT count(*) FROM embeddings WHERE {scope} AND note_id = :n "
                "AND kind = 'part'), "
                f"(SELECT count(*) FROM jobs WHERE {scope} AND {OPEN} "
                "AND kind IN ('chunk', 'embed')), "
                f"(SELECT count(*) FROM jobs WHERE {scope} AND {OPEN})",
                p=project,
                n=note_id,
            )
            if t_embedded is None and parts and vectors >= parts and not busy:
                t_embedded = time.perf_counter()
            if t_embedded is not None and not open_jobs:
                t_idle = time.perf_counter()
                break
            await asyncio.sleep(0.05)
        else:
            raise RuntimeError(f"{project}: not chunked, embedded and idle in {limit_s:.0f} s")
        jobs = await job_times(db, scope, p=project)
    finally:
        await db.close()
    return {
        "note": note_id,
        "upload_s": t_upload - t0,
        "embedded_s": t_embedded - t0,
        "idle_s": t_idle - t0,
        "passages": parts,
        "jobs": jobs,
    }


def run(docs: list[corpus.Doc], args: Any) -> dict[str, Any]:
    """The --ingest-pdf mode: its part of the result record."""
    from bench.passages import chunked

    pages = page_lines(docs, args.pages)
    data = pdf(pages)
    chars = sum(len(line) for page in pages for line in page)
    config = chunked(args.tokens, args.overlap)
    runs = []
    with running_stack() as stack:
        stack.extra_env.update(config.env)
        url = stack.start_api()
        _, key = stack.tenant_key()
        stack.start_worker()
        warm = pdf(page_lines(docs, 3), title="warm up")
        asyncio.run(one_run(stack, url, key, "warm-up", warm, args.timeout))
        for i in range(args.runs):
            result = asyncio.run(one_run(stack, url, key, f"pdf-{i}", data, args.timeout))
            runs.append(result)
            print(
                f"run {i + 1}: embedded {result['embedded_s']:.1f} s, idle "
                f"{result['idle_s']:.1f} s, {result['passages']} passages",
                flush=True,
            )
        data_dir = stack.dir
    shutil.rmtree(data_dir, ignore_errors=True)
    embedded = [r["embedded_s"] for r in runs]
    return {
        "config": config.name,
        "env": config.env,
        "pdf": {"pages": args.pages, "bytes": len(data), "chars": chars},
        "runs": runs,
        "embedded_s": _spread(embedded),
        "idle_s": _spread([r["idle_s"] for r in runs]),
        "pages_per_s": _spread([args.pages / s for s in embedded]),
        "chars_per_s": _spread([chars / s for s in embedded]),
        "passages": runs[-1]["passages"] if runs else 0,
    }


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "min": round(min(values), 2),
        "median": round(statistics.median(values), 2),
        "max": round(max(values), 2),
    }


def table(record: dict[str, Any]) -> str:
    p = record["pdf"]
    lines = [
        f"{record['command']}\n{record['machine']}\n",
        f"{p['pages']}-page PDF ({p['bytes'] // 1024} KiB, {p['chars']} characters), "
        f"{record['config']}, {len(record['runs'])} runs, {record['passages']} passages\n",
        "| measure | min | median | max |",
        "|---|---|---|---|",
    ]
    for key, label in (
        ("embedded_s", "upload -> every passage embedded (s)"),
        ("idle_s", "upload -> no job open (s)"),
        ("pages_per_s", "pages/s (to embedded)"),
        ("chars_per_s", "characters/s (to embedded)"),
    ):
        v = record[key]
        lines.append(f"| {label} | {v['min']:.2f} | {v['median']:.2f} | {v['max']:.2f} |")
    return "\n".join(lines)
