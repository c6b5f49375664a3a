"""Graph extraction in its child process: what the isolation costs.

    .venv/bin/python -m bench.graph_child [--notes 400] [--rounds 3]

spaCy runs in a child process of the worker (``app.providers.child``) so a
runaway input can be stopped and the worker's event loop never waits on it.
This measures, in one run and interleaved by round, the same LoCoMo turns
extracted in this process (``spacy_ner.parse``: the model call the worker
made in a thread before) and through the child (``SpacyExtractor.extract``:
pipe there and back), as a ratio; the child's resident memory; and the
issue's pathological document (60 KB of brackets), shaped, in the child.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import psutil

from app.providers.graph import spacy_ner
from bench.common import locomo_turns, machine, summary

PATHOLOGICAL = "---\nx: " + "[" * 30_000 + "]" * 30_000 + "\n---\n"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--notes", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    texts = [t["text"] for t in locomo_turns()][: args.notes]
    extractor = spacy_ner.SpacyExtractor(timeout_seconds=60)
    spacy_ner.parse(texts[0])  # load the model here ...
    await extractor.extract(texts[0])  # ... and in the child
    inproc: list[float] = []
    child: list[float] = []
    ratios = []
    for _ in range(args.rounds):
        began = time.perf_counter()
        for text in texts:
            t = time.perf_counter()
            spacy_ner.parse(text)
            inproc.append((time.perf_counter() - t) * 1000)
        here = time.perf_counter() - began
        began = time.perf_counter()
        for text in texts:
            t = time.perf_counter()
            await extractor.extract(text)
            child.append((time.perf_counter() - t) * 1000)
        there = time.perf_counter() - began
        ratios.append(there / here)
    pid = spacy_ner._child.pid
    rss = psutil.Process(pid).memory_info().rss / 2**20 if pid else float("nan")
    t = time.perf_counter()
    found = await extractor.extract(PATHOLOGICAL)
    pathological = time.perf_counter() - t
    await extractor.aclose()
    print(f"machine: {machine()}")
    print(f"notes: {len(texts)} LoCoMo turns x {args.rounds} rounds")
    print(f"in process : {summary(inproc)}")
    print(f"child      : {summary(child)}")
    print(
        f"child / in process, per round: {', '.join(f'{r:.2f}' for r in ratios)} "
        f"(median {statistics.median(ratios):.2f})"
    )
    print(f"child resident memory: {rss:.0f} MiB")
    print(
        f"60 KB of brackets, shaped, in the child: {pathological * 1000:.0f} ms "
        f"({len(found.entities)} entities)"
    )


if __name__ == "__main__":
    asyncio.run(main())
