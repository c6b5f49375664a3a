"""Retrieval quality on LoCoMo, end to end over HTTP.

    .venv/bin/python -m bench.locomo

Every dialogue turn becomes a note (id = its dia_id, in a project per
conversation, content "Speaker: text", the session date as its time); every
question with evidence is a find. Scores are recall@5, recall@10 and nDCG@10
of the evidence turns, for hybrid vs vector-only vs full-text-only, with and
without recency decay.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from datetime import datetime

import httpx

from bench.common import LOCOMO, machine, running_stack
from bench.pipeline import wait_embedded


def _date(raw: str) -> str:
    # "1:56 pm on 8 May, 2023"
    return datetime.strptime(raw.strip(), "%I:%M %p on %d %B, %Y").isoformat()


def load() -> tuple[list[tuple[str, dict]], list[tuple[str, dict]]]:
    data = json.loads(LOCOMO.read_text())
    notes, questions = [], []
    for conv in data:
        project = conv["sample_id"].lower()
        c = conv["conversation"]
        for key, turns in c.items():
            if not key.startswith("session_") or not isinstance(turns, list):
                continue
            when = _date(c[f"{key}_date_time"])
            for turn in turns:
                notes.append(
                    (
                        project,
                        {
                            "id": turn["dia_id"],
                            "content": f"{turn['speaker']}: {turn['text']}",
                            "tags": {"speaker": turn["speaker"], "session": key},
                            "created_at": when,
                        },
                    )
                )
        for qa in conv["qa"]:
            if qa.get("evidence"):
                questions.append((project, qa))
    return notes, questions


def metrics(found: list[str], evidence: list[str]) -> tuple[float, float, float]:
    wanted = set(evidence)
    r5 = len(wanted & set(found[:5])) / len(wanted)
    r10 = len(wanted & set(found[:10])) / len(wanted)
    dcg = sum(1 / math.log2(i + 2) for i, f in enumerate(found[:10]) if f in wanted)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(wanted), 10)))
    return r5, r10, dcg / ideal


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


async def evaluate(url: str, key: str, questions, configs) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        for name, extra in configs:
            totals = [0.0, 0.0, 0.0]
            latencies = []
            for project, qa in questions:
                t = time.perf_counter()
                r = await client.post(
                    "/v1/search",
                    json={"query": qa["question"], "limit": 10, **extra},
                    headers={"Authorization": f"Bearer {key}", "X-Project": project},
                )
                latencies.append((time.perf_counter() - t) * 1000)
                r.raise_for_status()
                found = [n["id"] for n in r.json()["notes"]]
                for i, v in enumerate(metrics(found, qa["evidence"])):
                    totals[i] += v
            n = len(questions)
            latencies.sort()
            out[name] = {
                "recall@5": totals[0] / n,
                "recall@10": totals[1] / n,
                "ndcg@10": totals[2] / n,
                "p50_ms": latencies[len(latencies) // 2],
                "p95_ms": latencies[int(len(latencies) * 0.95)],
            }
    return out


CONFIGS = [
    ("hybrid, no decay", {"stages": "hybrid", "half_life_days": 0}),
    ("vector only, no decay", {"stages": "vector", "half_life_days": 0}),
    ("full text only, no decay", {"stages": "text", "half_life_days": 0}),
    ("hybrid, decay 30 d", {"stages": "hybrid"}),
]


def main() -> None:
    notes, questions = load()
    with running_stack() as stack:
        url = stack.start_api()
        _, key = stack.tenant_key()
        stack.start_worker()
        t = time.perf_counter()
        asyncio.run(run(url, key, notes, questions))
        wait_embedded(stack, "D", len(notes))
        ingest = time.perf_counter() - t
        # Warm up: load the API's query model and Postgres caches (not counted).
        asyncio.run(evaluate(url, key, questions[:50], CONFIGS[:1]))
        results = asyncio.run(evaluate(url, key, questions, CONFIGS))
    print(
        json.dumps(
            {
                "machine": machine(),
                "notes": len(notes),
                "questions": len(questions),
                "ingest_s": ingest,
                "results": results,
            },
            indent=2,
        )
    )
    print("\n| configuration | recall@5 | recall@10 | nDCG@10 | find p50 | find p95 |")
    print("|---|---|---|---|---|---|")
    for name, m in results.items():
        print(
            f"| {name} | {m['recall@5']:.3f} | {m['recall@10']:.3f} | {m['ndcg@10']:.3f} "
            f"| {m['p50_ms']:.1f} ms | {m['p95_ms']:.1f} ms |"
        )


if __name__ == "__main__":
    main()
