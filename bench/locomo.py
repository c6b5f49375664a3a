"""Retrieval quality on LoCoMo, end to end over HTTP.

    .venv/bin/python -m bench.locomo

Every dialogue turn becomes a note (id = its dia_id, in a project per
conversation, content "Speaker: text", the session date as its time); every
question with evidence is a find. Scores are recall@5, recall@10 and nDCG@10
of the evidence turns, for hybrid vs vector-only vs full-text-only, with and
without recency decay. Then, in the same run, keep's own local store on the
same data and embedding model (bench/keep_local.py, in keep's virtualenv at
``$KEEP_PYTHON``; skipped with a message when that is missing).

    .venv/bin/python -m bench.locomo --stream

The stream variant, over HTTP: every turn in one project, in a shuffled
order, all written at one moment, with ids that do not reveal the order
(``t-`` + a hash of conversation and dia_id), tagged with speaker, session
and conversation; each question is a find limited to its conversation by
the tag filter (limit 50, ``explain: true``). Scored for the served order
(the first 10), fusion only (those 50 re-sorted by ``explain.relevance``;
the same call, so the same latency) and ``stages: "text"`` (a call of its
own, limit 10). Twice: the tagged stream, and an untagged one (conversation
tag only: an outside evaluator may drop the others), each its own project.

    .venv/bin/python -m bench.locomo --cv [--grid small|none]

The offline leave-one-conversation-out report of bench/locomo_cv.py (the
arguments after ``--cv`` go to it).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import ROOT, machine, running_stack
from bench.locomo_data import load, metrics
from bench.pipeline import wait_embedded


async def run(url: str, key: str, notes, questions) -> dict[str, dict[str, float]]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        sem = asyncio.Semaphore(8)

        async def put(project: str, note: dict) -> None:
            async with sem:
                r = await client.post(
                    "/v1/notes",
                    json=note,
                    headers={"Authorization": f"Bearer {key}", "X-Project": project},
                )
                r.raise_for_status()

        await asyncio.gather(*(put(p, n) for p, n in notes))
        return {}


CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


def score(rows: list[tuple[str, int, tuple[float, float, float]]], latencies: list[float]) -> dict:
    """Means over questions, overall, per category and per conversation."""

    def mean(sel: list[tuple[float, float, float]]) -> dict[str, float]:
        n = len(sel) or 1
        return {
            "recall@5": sum(m[0] for m in sel) / n,
            "recall@10": sum(m[1] for m in sel) / n,
            "ndcg@10": sum(m[2] for m in sel) / n,
            "n": len(sel),
        }

    latencies = sorted(latencies)
    out = mean([m for _, _, m in rows])
    out |= {
        "p50_ms": latencies[len(latencies) // 2] if latencies else 0.0,
        "p95_ms": latencies[int(len(latencies) * 0.95)] if latencies else 0.0,
        "by_category": {
            CATEGORIES.get(c, str(c)): mean([m for _, cat, m in rows if cat == c])
            for c in sorted({cat for _, cat, _ in rows})
        },
        "by_conversation": {
            p: mean([m for proj, _, m in rows if proj == p])
            for p in sorted({proj for proj, _, _ in rows})
        },
    }
    return out


async def evaluate(url: str, key: str, questions, configs) -> dict[str, dict]:
    """Every question under every configuration, interleaved (question by
    question), so background work on the machine weighs on all alike."""
    rows: dict[str, list] = {name: [] for name, _ in configs}
    latencies: dict[str, list[float]] = {name: [] for name, _ in configs}
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        for project, qa in questions:
            for name, extra in configs:
                t = time.perf_counter()
                r = await client.post(
                    "/v1/search",
                    json={"query": qa["question"], "limit": 10, **extra},
                    headers={"Authorization": f"Bearer {key}", "X-Project": project},
                )
                latencies[name].append((time.perf_counter() - t) * 1000)
                r.raise_for_status()
                found = [n["id"] for n in r.json()["notes"]]
                rows[name].append((project, qa.get("category", 0), metrics(found, qa["evidence"])))
    return {name: score(rows[name], latencies[name]) for name, _ in configs}


# The default row sends nothing but the question: what a fresh `keepmem up` does.
CONFIGS = [
    ("default settings", {}),
    ("hybrid, no decay", {"stages": "hybrid", "half_life_days": 0}),
    ("vector only, no decay", {"stages": "vector", "half_life_days": 0}),
    ("full text only, no decay", {"stages": "text", "half_life_days": 0}),
]


def tables(results: dict[str, dict]) -> str:
    """Markdown: every configuration side by side, then per category and
    per conversation (recall@10 / nDCG@10)."""
    lines = [
        "| configuration | recall@5 | recall@10 | nDCG@10 | find p50 | find p95 |",
        "|---|---|---|---|---|---|",
    ]
    for name, m in results.items():
        lines.append(
            f"| {name} | {m['recall@5']:.3f} | {m['recall@10']:.3f} | {m['ndcg@10']:.3f} "
            f"| {m['p50_ms']:.1f} ms | {m['p95_ms']:.1f} ms |"
        )
    for part in ("by_category", "by_conversation"):
        groups = [g for g in results.values() if part in g]
        if not groups:
            continue
        heads = list(groups[0][part])
        counts = " | ".join(f"{h} (n={groups[0][part][h]['n']})" for h in heads)
        lines += ["", f"recall@10 / nDCG@10 {part.replace('_', ' ')}:", ""]
        lines += [f"| configuration | {counts} |", "|---|" + "---|" * len(heads)]
        for name, m in results.items():
            if part in m:
                cells = " | ".join(
                    f"{m[part][h]['recall@10']:.3f} / {m[part][h]['ndcg@10']:.3f}" for h in heads
                )
                lines.append(f"| {name} | {cells} |")
    return "\n".join(lines)


def wait_idle(stack, timeout: float = 1800) -> None:
    """Until no job is pending, dispatched or running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        open_jobs = stack.sql(
            "SELECT count(*) FROM jobs WHERE status IN ('pending', 'dispatched', 'running')"
        )
        if open_jobs == "0":
            return
        time.sleep(2)
    raise RuntimeError(f"jobs still open after {timeout} s")


STREAM_MOMENT = "2026-03-10T12:00:00+00:00"
STREAM_SEED = 31


def stream_notes(tagged: bool) -> tuple[list[dict], list[tuple[str, dict]], dict[str, str]]:
    """load()'s turns as one shuffled stream written at one moment: the notes
    (in put order), the questions (conversation, qa), and note id -> dia_id."""
    turns, questions = load()
    rng = random.Random(STREAM_SEED)
    rng.shuffle(turns)
    notes, back = [], {}
    for conv, turn in turns:
        note_id = "t-" + hashlib.sha1(f"{conv}/{turn['id']}".encode()).hexdigest()[:12]
        back[note_id] = turn["id"]
        tags = {**turn["tags"], "conversation": conv} if tagged else {"conversation": conv}
        notes.append(
            {"id": note_id, "content": turn["content"], "tags": tags, "created_at": STREAM_MOMENT}
        )
    return notes, questions, back


async def put_stream(url: str, key: str, project: str, notes: list[dict]) -> None:
    """In batches of 100, one after another: stored in the order given."""
    headers = {"Authorization": f"Bearer {key}", "X-Project": project}
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        for i in range(0, len(notes), 100):
            r = await client.post(
                "/v1/notes/batch", json={"notes": notes[i : i + 100]}, headers=headers
            )
            r.raise_for_status()
            assert r.json()["failed"] == 0, r.text


async def evaluate_stream(
    url: str, key: str, project: str, questions, back: dict[str, str], label: str
) -> dict[str, dict]:
    """Served, fusion-only and text-only scores of every question, each asked
    within its own conversation."""
    names = [f"{label}: served", f"{label}: fusion only", f"{label}: text only"]
    rows: dict[str, list] = {n: [] for n in names}
    latencies: dict[str, list[float]] = {n: [] for n in names}
    headers = {"Authorization": f"Bearer {key}", "X-Project": project}
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        for conv, qa in questions:
            asked = {"query": qa["question"], "tags": {"conversation": conv}}
            t = time.perf_counter()
            r = await client.post(
                "/v1/search", json={**asked, "limit": 50, "explain": True}, headers=headers
            )
            ms = (time.perf_counter() - t) * 1000
            r.raise_for_status()
            served = r.json()["notes"]
            fused = sorted(served, key=lambda n: -n["explain"]["relevance"])
            t = time.perf_counter()
            r = await client.post(
                "/v1/search", json={**asked, "limit": 10, "stages": "text"}, headers=headers
            )
            text_ms = (time.perf_counter() - t) * 1000
            r.raise_for_status()
            for name, found, took in zip(
                names, (served, fused, r.json()["notes"]), (ms, ms, text_ms), strict=True
            ):
                dia = [back.get(n["id"], n["id"]) for n in found[:10]]
                rows[name].append((conv, qa.get("category", 0), metrics(dia, qa["evidence"])))
                latencies[name].append(took)
    return {name: score(rows[name], latencies[name]) for name in names}


def stream_main() -> None:
    """--stream: the tagged and the untagged stream, each in its own project."""
    variants = {"tagged stream": stream_notes(True), "untagged stream": stream_notes(False)}
    with running_stack() as stack:
        url = stack.start_api()
        _, key = stack.tenant_key()
        stack.start_worker()
        t = time.perf_counter()
        for label, (notes, _, _) in variants.items():
            asyncio.run(put_stream(url, key, label.replace(" ", "-"), notes))
        total = sum(len(v[0]) for v in variants.values())
        wait_embedded(stack, "t-", total)
        ingest = time.perf_counter() - t
        wait_idle(stack)  # see main()
        stack.sql("ANALYZE")
        results: dict[str, dict] = {}
        for label, (_, questions, back) in variants.items():
            project = label.replace(" ", "-")
            asyncio.run(evaluate_stream(url, key, project, questions[:50], back, label))  # warm-up
            results |= asyncio.run(evaluate_stream(url, key, project, questions, back, label))
    notes, questions, _ = variants["tagged stream"]
    _print_run(len(notes), len(questions), ingest, total / ingest, results)


def _print_run(notes: int, questions: int, ingest: float, rate: float, results: dict) -> None:
    """One run's figures as JSON, then as Markdown tables."""
    record = {
        "machine": machine(),
        "notes": notes,
        "questions": questions,
        "ingest_s": ingest,
        "put_per_s": rate,
        "results": results,
    }
    print(json.dumps(record, indent=2))
    print("\n" + tables(results))


KEEP_PYTHON = Path(
    os.environ.get(
        "KEEP_PYTHON", Path.home() / ".cache" / "keepmem-bench" / "keep-venv" / "bin" / "python"
    )
)


def keep_local() -> dict[str, Any] | None:
    """keep's own local store on the same data and model (bench/keep_local.py,
    in keep's virtualenv), after keepmem's stack has stopped."""
    if not KEEP_PYTHON.exists():
        print(f"keep-skill comparison skipped: no {KEEP_PYTHON}", file=sys.stderr)
        return None
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [str(KEEP_PYTHON), "-m", "bench.keep_local"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:  # keepmem's own results still print
        print(f"keep-skill comparison failed:\n{out.stderr[-3000:]}", file=sys.stderr)
        return None
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--only", help="run only configurations whose name contains this")
    parser.add_argument("--no-keep", action="store_true", help="skip keep's local store")
    parser.add_argument("--stream", action="store_true", help="the stream variant instead")
    parser.add_argument(
        "--cv",
        action="store_true",
        help="bench/locomo_cv.py's offline report instead (the other arguments go to it)",
    )
    if "--cv" in sys.argv[1:]:  # before parsing: its arguments (and --help) are locomo_cv's
        from bench import locomo_cv

        sys.argv = [f"{sys.argv[0]} --cv", *(a for a in sys.argv[1:] if a != "--cv")]
        locomo_cv.main()
        return
    args = parser.parse_args()
    if args.stream:
        stream_main()
        return
    configs = [c for c in CONFIGS if not args.only or args.only in c[0]]
    notes, questions = load()
    with running_stack() as stack:
        url = stack.start_api()
        _, key = stack.tenant_key()
        stack.start_worker()
        t = time.perf_counter()
        asyncio.run(run(url, key, notes, questions))
        wait_embedded(stack, "D", len(notes))
        ingest = time.perf_counter() - t
        # The questions run on a quiet machine: the worker's summaries and graph
        # extraction would otherwise share the two cores with find, and timings
        # would measure them.
        wait_idle(stack)
        # and with the planner's statistics of the loaded tables, as autovacuum
        # leaves them within a minute or so of a bulk load (before, the freshly
        # loaded tables look empty to it and the vector stage's join picks a
        # plan that reads the project's notes once per vector: ~50 ms, not ~5)
        stack.sql("ANALYZE")
        # Warm up: load the API's query model and Postgres caches (not counted).
        asyncio.run(evaluate(url, key, questions[:50], configs[:1]))
        results = asyncio.run(evaluate(url, key, questions, configs))
    keep = None if args.no_keep else keep_local()
    if keep is not None:
        results[f"keep-skill {keep['keep_version']} local store (its find)"] = keep
    _print_run(len(notes), len(questions), ingest, len(notes) / ingest, results)
    print(f"\nkeepmem ingest (put -> embedded): {len(notes) / ingest:.1f} notes/s")
    if keep is not None:
        print(
            f"keep-skill local put: {keep['put_per_s']:.1f} notes/s "
            f"(p50 {keep['put_p50_ms']:.1f} ms, p95 {keep['put_p95_ms']:.1f} ms)"
        )


if __name__ == "__main__":
    main()
