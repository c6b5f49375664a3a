"""Does find's ranking generalise? Leave-one-conversation-out, offline.

    .venv/bin/python -m bench.locomo_cv [--grid small|none]

Uses ``bench/locomo_ablation.py``'s in-process rebuild of find (PostgreSQL's
own text search, BM25 as the service computes it, the same MiniLM vectors,
``app.search.ranking`` itself). Three reports:

1. **Out-of-fold figures.** For each conversation of the shared half: choose
   the ranking's weights on the other four (the best mean nDCG@10 over a
   small grid), score the held-out one with them; the headline is the mean
   of the held-out scores, beside the shipped defaults and ``stages: "text"``
   on the same fold. A weight that wins in-sample and loses out-of-fold
   shows here. Only weights that also hold on a store of another kind may
   be chosen: the unrelated-notes case set (``bench/unrelated_notes.json``,
   notes on many topics written within a minute) must keep precision@1 >=
   0.9 — conversations alone pull the text share up past what such a store
   bears. Then the weights the same choice makes on all five: what ships,
   and the text share's trade-off between the two kinds of store.
2. **The stream variant**: the same turns as one unrelated stream — shuffled
   into one order, all written at one moment — so a note's timeline
   neighbours and episode are unrelated to it. Served order (the full
   ranking) against fusion only (the stage blend, no context bonuses) and
   text only, questions limited to their own conversation as before; then
   the same stream without tags, and the conversations in order without
   tags (what context is left when nothing says which notes belong
   together).
3. All for the shipped weights, so a change to ``ranking.py`` can be read
   against the table in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import itertools
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from bench import unrelated
from bench.common import machine
from bench.locomo_ablation import Corpus, find, weights
from bench.locomo_data import metrics

#: The knobs chosen per fold, and the values tried (the shipped ones included).
GRID: dict[str, list[float]] = {
    "TEXT_SHARE": [0.3, 0.4, 0.5],
    "NEIGHBOUR_WEIGHT": [0.25, 0.5, 0.75],
    "EPISODE_WEIGHT": [0.3, 0.45, 0.6, 0.75],
}
MIN_PRECISION = unrelated.MIN_PRECISION  # on the unrelated-notes case set
NO_CONTEXT = {"NEIGHBOUR_WEIGHT": 0, "EPISODE_WEIGHT": 0, "DATE_WEIGHT": 0, "TAG_WEIGHT": 0}
Scores = dict[int, tuple[float, float, float]]  # question -> recall@5, recall@10, nDCG@10


def _scores(corpus: Corpus, questions: list[int], stages: str = "hybrid") -> Scores:
    return {
        q: metrics(find(corpus, q, stages), corpus.questions[q][1]["evidence"]) for q in questions
    }


def _mean(scores: Scores, questions: list[int]) -> tuple[float, float, float]:
    n = max(len(questions), 1)
    return (
        sum(scores[q][0] for q in questions) / n,
        sum(scores[q][1] for q in questions) / n,
        sum(scores[q][2] for q in questions) / n,
    )


def _configs(grid: dict[str, list[float]]) -> Iterator[dict[str, float]]:
    names = list(grid)
    for values in itertools.product(*(grid[n] for n in names)):
        yield dict(zip(names, values, strict=True))


def _fmt(m: tuple[float, float, float]) -> str:
    return f"{m[0]:.3f} | {m[1]:.3f} | {m[2]:.3f}"


def unrelated_corpus() -> Corpus:
    """The unrelated-notes case set as bench/unrelated.py writes it (one
    project, shuffled, in bursts within one minute)."""
    cases = unrelated.load_cases()
    notes = [
        (
            unrelated.PROJECT,
            {
                "id": n["id"],
                "content": n["content"],
                "tags": n.get("tags", {}),
                "created_at": n["created_at"],
            },
        )
        for n in unrelated.scheduled(cases["notes"])
    ]
    questions = [
        (unrelated.PROJECT, {"question": q["question"], "evidence": [q["answer"]]})
        for q in cases["questions"]
    ]
    return Corpus(notes, questions)


def precision_at_1(corpus: Corpus) -> float:
    n = len(corpus.questions)
    return sum(find(corpus, q)[0] == corpus.questions[q][1]["evidence"][0] for q in range(n)) / n


def cross_validate(corpus: Corpus, grid: dict[str, list[float]], cases: Corpus) -> None:
    projects = sorted({p for p, _ in corpus.questions})
    of = {p: [q for q, (pp, _) in enumerate(corpus.questions) if pp == p] for p in projects}
    everything = [q for qs in of.values() for q in qs]
    configs = list(_configs(grid)) or [{}]
    by_config: list[Scores] = []
    precision: list[float] = []
    for config in configs:
        with weights(**config):
            by_config.append(_scores(corpus, everything))
            precision.append(precision_at_1(cases))
    allowed = [i for i, p in enumerate(precision) if p >= MIN_PRECISION] or list(
        range(len(configs))
    )
    shipped = _scores(corpus, everything)
    text = _scores(corpus, everything, "text")
    print(
        "Leave-one-conversation-out (choose on four by mean nDCG@10 among the weights that "
        f"keep unrelated-notes precision@1 >= {MIN_PRECISION}, score the fifth):\n"
    )
    print(
        "| held out | chosen | out-of-fold r@5 | r@10 | nDCG@10 | shipped r@5 | r@10 | nDCG@10 "
        "| text r@5 | r@10 | nDCG@10 |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    oof: Scores = {}
    for held in projects:
        train = [q for p in projects if p != held for q in of[p]]
        best = max(allowed, key=lambda i: _mean(by_config[i], train)[2])
        for q in of[held]:
            oof[q] = by_config[best][q]
        print(
            f"| {held} | {_named(configs[best])} | {_fmt(_mean(oof, of[held]))} | "
            f"{_fmt(_mean(shipped, of[held]))} | {_fmt(_mean(text, of[held]))} |"
        )
    print(
        f"| **all** | | {_fmt(_mean(oof, everything))} | {_fmt(_mean(shipped, everything))} | "
        f"{_fmt(_mean(text, everything))} |\n"
    )
    final = max(allowed, key=lambda i: _mean(by_config[i], everything)[2])
    chosen = ", ".join(f"{k} = {v:g}" for k, v in configs[final].items())
    print(f"Chosen on all five (what ships): {chosen or 'the shipped weights'}\n")
    print(f"Unrelated-notes precision@1 with the shipped weights: {precision_at_1(cases):.3f}\n")
    print("The text share between the two kinds of store (the other weights as chosen):\n")
    print("| TEXT_SHARE | unrelated-notes precision@1 | LoCoMo r@5 | r@10 | nDCG@10 |")
    print("|---|---|---|---|---|")
    for i, config in enumerate(configs):
        rest = {k: v for k, v in config.items() if k != "TEXT_SHARE"}
        if rest == {k: v for k, v in configs[final].items() if k != "TEXT_SHARE"}:
            share = config.get("TEXT_SHARE", "shipped")
            print(f"| {share} | {precision[i]:.3f} | {_fmt(_mean(by_config[i], everything))} |")
    print()


def _named(config: dict[str, float]) -> str:
    return ", ".join(f"{k.split('_')[0].lower()} {v:g}" for k, v in config.items()) or "shipped"


def as_stream(corpus: Corpus, *, seed: int = 30) -> Corpus:
    """The same notes as one unrelated stream: shuffled within each project,
    all written at one moment, with ids that do not give the order away (as
    content ids do not): the timeline follows the shuffled order."""
    stream = Corpus.__new__(Corpus)
    stream.__dict__.update(corpus.__dict__)
    moment = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
    stream.prev, stream.next = {}, {}
    rng = random.Random(seed)
    renamed: dict[tuple[str, str], str] = {}
    for project, idx in corpus.by_project.items():
        line = list(idx)
        rng.shuffle(line)
        for position, i in enumerate(line):
            renamed[(project, corpus.docs[i].id)] = f"n{position}"
        for a, b in itertools.pairwise(line):
            stream.next[a], stream.prev[b] = b, a
    stream.docs = [
        replace(d, created_at=moment, id=renamed[(d.project, d.id)]) for d in corpus.docs
    ]
    stream.questions = [
        (p, {**qa, "evidence": [renamed.get((p, e), e) for e in qa["evidence"]]})
        for p, qa in corpus.questions
    ]
    return stream


def as_one_stream(corpus: Corpus, *, seed: int = 30) -> Corpus:
    """Every conversation's turns in ONE project, shuffled together, one
    moment, ids that hide the order, a ``conversation`` tag on each; a
    question finds within its conversation (a tag filter): BM25's counts are
    the whole project's, a note's timeline neighbours the nearest turns of
    its conversation in the shuffled order (as bench/locomo.py --stream
    stores it over HTTP)."""
    stream = Corpus.__new__(Corpus)
    stream.__dict__.update(corpus.__dict__)
    moment = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
    order = list(range(len(corpus.docs)))
    random.Random(seed).shuffle(order)
    name = {i: f"n{position}" for position, i in enumerate(order)}
    stream.docs = [
        replace(
            d,
            project="stream",
            created_at=moment,
            id=name[i],
            tags=d.tags | {f"conversation={d.project}"},
        )
        for i, d in enumerate(corpus.docs)
    ]
    everything = list(range(len(corpus.docs)))
    stream.by_project = {"stream": everything}
    stream.df = {"stream": Counter(t for d in stream.docs for t in d.terms)}
    stream.avgdl = {"stream": sum(d.length for d in stream.docs) / len(stream.docs)}
    stream.prev, stream.next = {}, {}
    for idx in corpus.by_project.values():
        line = sorted(idx, key=order.index)
        for a, b in itertools.pairwise(line):
            stream.next[a], stream.prev[b] = b, a
    renamed = {(d.project, d.id): name[i] for i, d in enumerate(corpus.docs)}
    stream.questions = [
        ("stream", {**qa, "evidence": [renamed.get((p, e), e) for e in qa["evidence"]]})
        for p, qa in corpus.questions
    ]
    stream.within = {q: corpus.by_project[p] for q, (p, _) in enumerate(corpus.questions)}
    return stream


def untagged(corpus: Corpus) -> Corpus:
    """The same notes without their tags (no session, no speaker)."""
    bare = Corpus.__new__(Corpus)
    bare.__dict__.update(corpus.__dict__)
    bare.docs = [replace(d, tags=frozenset()) for d in corpus.docs]
    return bare


def stream_report(corpus: Corpus) -> None:
    one = as_one_stream(corpus)
    _orders("Stream variant: every conversation in one project (the issue's)", one)
    _orders("The same, without tags", untagged(one))
    stream = as_stream(corpus)
    _orders("Stream variant, a project per conversation", stream)
    _orders("The same stream without tags", untagged(stream))
    _orders("The conversations in order, without tags", untagged(corpus))


def _orders(title: str, stream: Corpus) -> None:
    everything = list(range(len(stream.questions)))
    served = _scores(stream, everything)
    with weights(**NO_CONTEXT):
        fusion = _scores(stream, everything)
    text = _scores(stream, everything, "text")
    print(f"{title}:\n")
    print("| order | recall@5 | recall@10 | nDCG@10 |")
    print("|---|---|---|---|")
    rows = (("served (full ranking)", served), ("fusion only", fusion), ("text only", text))
    for name, s in rows:
        print(f"| {name} | {_fmt(_mean(s, everything))} |")
    print()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--grid", choices=["small", "none"], default="small")
    args = parser.parse_args()
    grid: dict[str, Any] = GRID if args.grid == "small" else {}
    print(f"machine: {machine()}\n")
    corpus = Corpus()
    cross_validate(corpus, grid, unrelated_corpus())
    stream_report(corpus)


if __name__ == "__main__":
    main()
