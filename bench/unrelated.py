"""Find over an ordinary agent store: unrelated notes written in bursts.

    .venv/bin/python -m bench.unrelated [--check]

The case set (``bench/unrelated_notes.json``): notes on many unrelated
topics (deploys, preferences, recipes, travel, pets, money ...) and
questions with exactly one right note each, most of them paraphrases that
share few words with it. The notes go into one project in a shuffled order,
all written within one minute in bursts (a few notes a fraction of a second
apart, the bursts some seconds apart), so every note is every other's
timeline neighbour or episode mate. Over HTTP, each question is one find
for every note (``explain: true``), and the report says, per ranking:

* precision@1: the right note first;
* the best wrong note's score per question (mean, p90, max);
* "unrelated" results, those neither stage connects to the question (cosine
  < 0.1 and no full-text match): how many, their highest score, and how
  many score above 0.2 (violations: context alone lifted them);
* the right note's score (mean, min; 0 when it is not returned);
* find's latency.

Rankings: the served order (default find); fusion only (the same results
re-sorted by ``explain.relevance``, which is then their score); and
``stages: "text"`` (a call of its own; a result's cosine for "unrelated" is
the one the default call reported for that note). ``--check`` exits 1 when
the served order's precision@1 is below 0.9 or it has a violation.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from bench.common import machine, pct, running_stack
from bench.locomo import wait_idle
from bench.pipeline import wait_embedded

CASES = Path(__file__).with_name("unrelated_notes.json")
PROJECT = "unrelated"
SEED = 31
MINUTE = datetime(2026, 3, 10, 9, 15, tzinfo=UTC)  # every note is written within it
MAX_LIMIT = 100  # SearchRequest.limit's bound
UNRELATED_COSINE = 0.1
VIOLATION_SCORE = 0.2
MIN_PRECISION = 0.9


def load_cases() -> dict[str, Any]:
    """``{"notes": [...], "questions": [...]}`` from ``bench/unrelated_notes.json``."""
    cases: dict[str, Any] = json.loads(CASES.read_text())
    return cases


def scheduled(notes: list[dict[str, Any]], seed: int = SEED) -> list[dict[str, Any]]:
    """The notes shuffled, each with a ``created_at`` in ``MINUTE``: bursts of
    5-10 notes 0.2 s apart, the bursts spread evenly over the minute."""
    rng = random.Random(seed)
    order = list(notes)
    rng.shuffle(order)
    sizes: list[int] = []
    while sum(sizes) < len(order):
        sizes.append(min(rng.randint(5, 10), len(order) - sum(sizes)))
    gap = 55 / max(len(sizes) - 1, 1)  # the last burst still ends within the minute
    out, i = [], 0
    for b, size in enumerate(sizes):
        for k in range(size):
            when = MINUTE + timedelta(seconds=b * gap + k * 0.2)
            out.append({**order[i], "created_at": when.isoformat()})
            i += 1
    return out


async def put_all(url: str, key: str, notes: list[dict[str, Any]]) -> None:
    """One batch: the notes stored in the order given."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        r = await client.post(
            "/v1/notes/batch",
            json={"notes": notes},
            headers={"Authorization": f"Bearer {key}", "X-Project": PROJECT},
        )
        r.raise_for_status()
        assert r.json()["failed"] == 0, r.text


async def ask(
    url: str, key: str, questions: list[dict[str, str]], limit: int
) -> list[dict[str, Any]]:
    """Per question, the default find's and the text-only find's results
    (``[{id, score, explain}]``) and their latencies (ms)."""
    headers = {"Authorization": f"Bearer {key}", "X-Project": PROJECT}
    rows = []
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        for qa in questions:
            row: dict[str, Any] = {"answer": qa["answer"]}
            for name, extra in (("default", {}), ("text", {"stages": "text"})):
                body = {"query": qa["question"], "limit": limit, "explain": True, **extra}
                t = time.perf_counter()
                r = await client.post("/v1/search", json=body, headers=headers)
                row[f"{name}_ms"] = (time.perf_counter() - t) * 1000
                r.raise_for_status()
                row[name] = r.json()["notes"]
            rows.append(row)
    return rows


def measure(
    rows: list[dict[str, Any]], ranked: list[list[tuple[str, float, float | None, float | None]]]
) -> dict[str, Any]:
    """The figures of one ranking: per question, its results best first as
    (id, score, cosine, bm25)."""
    top1, wrong_best, right, unrelated = 0, [], [], []
    for row, results in zip(rows, ranked, strict=True):
        top1 += bool(results) and results[0][0] == row["answer"]
        wrong_best.append(max((s for i, s, _, _ in results if i != row["answer"]), default=0.0))
        right.append(next((s for i, s, _, _ in results if i == row["answer"]), 0.0))
        unrelated += [
            s
            for _, s, cos, bm25 in results
            if cos is not None and cos < UNRELATED_COSINE and bm25 is None
        ]
    return {
        "precision@1": top1 / len(rows),
        "best_wrong": {
            "mean": statistics.fmean(wrong_best),
            "p90": pct(wrong_best, 90),
            "max": max(wrong_best),
        },
        "unrelated": {
            "count": len(unrelated),
            "max_score": max(unrelated, default=0.0),
            "violations": sum(s > VIOLATION_SCORE for s in unrelated),
        },
        "right": {"mean": statistics.fmean(right), "min": min(right)},
    }


def latency(values: list[float]) -> dict[str, float]:
    return {"p50_ms": pct(values, 50), "p95_ms": pct(values, 95)}


def report(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    served, fusion, text = [], [], []
    for row in rows:
        cosine = {n["id"]: n["explain"]["vector"] for n in row["default"]}
        served.append(
            [
                (n["id"], n["score"], n["explain"]["vector"], n["explain"]["bm25"])
                for n in row["default"]
            ]
        )
        by_relevance = sorted(row["default"], key=lambda n: -n["explain"]["relevance"])
        fusion.append(
            [
                (n["id"], n["explain"]["relevance"], n["explain"]["vector"], n["explain"]["bm25"])
                for n in by_relevance
            ]
        )
        text.append(
            [(n["id"], n["score"], cosine.get(n["id"]), n["explain"]["bm25"]) for n in row["text"]]
        )
    default_ms = [r["default_ms"] for r in rows]
    return {
        "served (default find)": measure(rows, served) | latency(default_ms),
        "fusion only (relevance)": measure(rows, fusion),
        'text only (stages: "text")': measure(rows, text) | latency([r["text_ms"] for r in rows]),
    }


def table(results: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| ranking | P@1 | best wrong mean / p90 / max | unrelated n / max | violations "
        "| right mean / min | find p50 / p95 |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, m in results.items():
        w, u, r = m["best_wrong"], m["unrelated"], m["right"]
        ms = f"{m['p50_ms']:.1f} / {m['p95_ms']:.1f} ms" if "p50_ms" in m else "(served call)"
        lines.append(
            f"| {name} | {m['precision@1']:.3f} | {w['mean']:.3f} / {w['p90']:.3f} / "
            f"{w['max']:.3f} | {u['count']} / {u['max_score']:.3f} | {u['violations']} "
            f"| {r['mean']:.3f} / {r['min']:.3f} | {ms} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--check",
        action="store_true",
        help=f"exit 1 if the served order's precision@1 < {MIN_PRECISION} or any violation",
    )
    args = parser.parse_args()
    cases = load_cases()
    notes, questions = scheduled(cases["notes"]), cases["questions"]
    limit = min(len(notes), MAX_LIMIT)
    with running_stack() as stack:
        url = stack.start_api()
        _, key = stack.tenant_key()
        stack.start_worker()
        asyncio.run(put_all(url, key, notes))
        wait_embedded(stack, "note-", len(notes))
        wait_idle(stack)
        stack.sql("ANALYZE")
        asyncio.run(ask(url, key, questions[:10], limit))  # warm-up, not counted
        rows = asyncio.run(ask(url, key, questions, limit))
    results = report(rows)
    served = results["served (default find)"]
    print(
        json.dumps(
            {
                "machine": machine(),
                "notes": len(notes),
                "questions": len(questions),
                "limit": limit,
                "results": results,
            },
            indent=2,
        )
    )
    print("\n" + table(results))
    if args.check and (
        served["precision@1"] < MIN_PRECISION or served["unrelated"]["violations"] > 0
    ):
        print("check failed", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
