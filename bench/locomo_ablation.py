"""What each part of find's ranking is worth on LoCoMo, offline.

    .venv/bin/python -m bench.locomo_ablation

The service's numbers come from ``bench/locomo.py`` (end to end over HTTP).
This script answers a different question quickly: take one part of the
ranking away (or put the old rank fusion back) and see what moves. It
rebuilds both stages in process — PostgreSQL's own ``to_tsvector`` and
``plainto_tsquery`` for the words (an embedded server, no schema), BM25 as
``keepmem_bm25`` computes it, the same MiniLM vectors — and hands the
candidates to ``app.search.ranking`` itself, with one weight changed at a
time. Its full configuration lands within a few thousandths of the
service's default row.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import re
import tempfile
from collections import Counter, defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from app.search import ranking
from app.search.ranking import Candidate, Key, natural_key
from bench.locomo import CATEGORIES
from bench.locomo_data import load, metrics

TEXT_LIMIT, VECTOR_LIMIT = 100, 200  # as find asks its stages, for limit 10
_LEXEME = re.compile(r"'((?:[^']|'')*)'(?::([0-9A-D,]+))?")


@dataclass
class Doc:
    project: str
    id: str
    created_at: datetime
    terms: dict[str, int]  # lexeme -> frequency
    length: int  # distinct lexemes, as length(tsvector)
    tags: frozenset[str]  # key=value tag terms, case-folded


def _parse(tsvector: str) -> dict[str, int]:
    out = {}
    for m in _LEXEME.finditer(tsvector):
        out[m.group(1).replace("''", "'")] = len(m.group(2).split(",")) if m.group(2) else 1
    return out


async def _words(notes: list, questions: list) -> tuple[list[dict[str, int]], list[list[str]]]:
    import asyncpg

    from app.cli.embedded import EmbeddedPostgres

    pg = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="keepmem-ablation-")))
    pg.start()
    try:
        conn = await asyncpg.connect(pg.url("postgres", "postgres").replace("+asyncpg", ""))
        docs = []
        for _, n in notes:
            tags = " ".join([n["id"], *n["tags"].values()])
            docs.append(
                _parse(
                    await conn.fetchval(
                        "SELECT (setweight(to_tsvector('english', $1), 'A') "
                        "|| to_tsvector('english', $2))::text",
                        tags,
                        n["content"],
                    )
                )
            )
        lexemes = []
        for _, qa in questions:
            tsq = await conn.fetchval("SELECT plainto_tsquery('english', $1)::text", qa["question"])
            found = (m.group(1).replace("''", "'") for m in _LEXEME.finditer(tsq or ""))
            lexemes.append(list(dict.fromkeys(found)))
        await conn.close()
        return docs, lexemes
    finally:
        pg.stop()


class Corpus:
    """Notes and questions with both stages' raw material: LoCoMo's by
    default, or any ``(project, note)`` / ``(project, {"question",
    "evidence"})`` lists in its shape (notes: id, content, tags, created_at)."""

    def __init__(self, notes: list | None = None, questions: list | None = None) -> None:
        from app.providers.embedding.minilm import MiniLMEncoder

        if notes is None or questions is None:
            notes, questions = load()
        self.notes, self.questions = notes, questions
        terms, self.lexemes = asyncio.run(_words(self.notes, self.questions))
        self.docs = [
            Doc(
                p,
                n["id"],
                datetime.fromisoformat(n["created_at"]).replace(tzinfo=UTC),
                t,
                len(t),
                frozenset(f"{k}={v}".casefold() for k, v in n["tags"].items()),
            )
            for (p, n), t in zip(self.notes, terms, strict=True)
        ]
        encoder = MiniLMEncoder(threads=2, batch_size=32)
        self.nv = np.asarray(encoder.encode([n["content"] for _, n in self.notes]))
        self.qv = np.asarray(encoder.encode([qa["question"] for _, qa in self.questions]))
        self.by_project: dict[str, list[int]] = defaultdict(list)
        for i, d in enumerate(self.docs):
            self.by_project[d.project].append(i)
        self.df = {
            p: Counter(t for i in idx for t in self.docs[i].terms)
            for p, idx in self.by_project.items()
        }
        self.avgdl = {
            p: float(np.mean([self.docs[i].length for i in idx]))
            for p, idx in self.by_project.items()
        }
        # the timeline: created_at, then natural id order
        self.prev: dict[int, int] = {}
        self.next: dict[int, int] = {}
        for idx in self.by_project.values():
            line = sorted(
                idx, key=lambda i: (self.docs[i].created_at, natural_key(self.docs[i].id))
            )
            for a, b in itertools.pairwise(line):
                if self.docs[b].created_at - self.docs[a].created_at <= ranking.EPISODE_GAP:
                    self.next[a], self.prev[b] = b, a

    def members(self, q: int) -> list[int]:
        """The notes question q may find: its project's, or those its filter
        keeps (``within``: a tag filter, as a find's ``tags``)."""
        within: dict[int, list[int]] = getattr(self, "within", {})
        return within.get(q) or self.by_project[self.questions[q][0]]

    def idf(self, q: int) -> dict[str, float]:
        project = self.questions[q][0]
        df, n = self.df[project], len(self.by_project[project])
        return {t: max(math.log((n - df[t] + 0.5) / (df[t] + 0.5)), 1e-6) for t in self.lexemes[q]}

    def full_match(self, q: int) -> float:
        """BM25 of a note of average length holding each question word once."""
        return sum(self.idf(q).values())

    def bm25(self, q: int) -> dict[int, float]:
        project = self.questions[q][0]
        idx, idf = self.members(q), self.idf(q)
        out = {}
        for i in idx:
            d = self.docs[i]
            norm = 1.2 * (0.25 + 0.75 * d.length / max(self.avgdl[project], 1))
            s = sum(idf[t] * d.terms[t] * 2.2 / (d.terms[t] + norm) for t in idf if t in d.terms)
            if s > 0:
                out[i] = s
        return out

    def cosines(self, q: int) -> dict[int, float]:
        idx = self.members(q)
        return dict(zip(idx, (self.nv[idx] @ self.qv[q]).tolist(), strict=True))


def _top(scores: dict[int, float], n: int) -> list[int]:
    return sorted(scores, key=lambda i: -scores[i])[:n]


def find(corpus: Corpus, q: int, stages: str = "hybrid", rrf: bool = False) -> list[str]:
    """find's candidate gathering and ranking, for one question."""
    text = corpus.bm25(q) if stages != "vector" else {}
    cos = corpus.cosines(q)
    if stages == "text":
        cos = {}
    text_hits = set(_top(text, TEXT_LIMIT))
    pool = text_hits | set(_top(cos, VECTOR_LIMIT))
    if rrf:  # the rank fusion find used before (keep's weights, k = 60)
        fused: dict[int, float] = defaultdict(float)
        for weight, hits in ((1.0, _top(cos, VECTOR_LIMIT)), (2.0, _top(text, TEXT_LIMIT))):
            for r, i in enumerate(hits):
                fused[i] += weight / (60 + r + 1)
        return [corpus.docs[i].id for i in _top(fused, 10)]
    docs = corpus.docs

    def candidate(i: int, text_hit: bool, context_only: bool = False) -> Candidate:
        d = docs[i]
        return Candidate(
            (d.id, "note", 0),
            d.created_at,
            d.created_at,
            text=text.get(i) if text_hit else None,
            cosine=cos.get(i) if cos else None,
            tags=d.tags,
            context_only=context_only,
        )

    found: dict[Key, Candidate] = {}
    for i in pool:
        c = candidate(i, i in text_hits)
        found[c.key] = c
    index = {docs[i].id: i for i in pool}
    full = corpus.full_match(q) if stages != "vector" else 0.0
    base = ranking.relevance(found.values(), stages, full_match=full)
    best = sorted(base, key=lambda k: -base[k])[: ranking.CONTEXT_FROM]
    neighbours: dict[str, tuple[str | None, str | None]] = {}
    for key in best:
        i = index[key[0]]
        before, after = corpus.prev.get(i), corpus.next.get(i)
        for n in (before, after):
            if n is not None and (docs[n].id, "note", 0) not in found:
                found[(docs[n].id, "note", 0)] = candidate(n, False, context_only=True)
                index[docs[n].id] = n
        neighbours[key[0]] = (
            docs[before].id if before is not None else None,
            docs[after].id if after is not None else None,
        )
    final = ranking.rank(
        found,
        ranking.relevance(found.values(), stages, full_match=full),
        neighbours=neighbours,
        question=ranking.Question.read(corpus.questions[q][1]["question"]),
        half_life_days=30.0,
    )
    return [k[0] for k, _ in sorted(final.items(), key=lambda kv: (-kv[1], kv[0]))][:10]


@contextmanager
def weights(**changed: Any):
    saved = {k: getattr(ranking, k) for k in changed}
    for k, v in changed.items():
        setattr(ranking, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(ranking, k, v)


VARIANTS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("rank fusion (RRF, keep's weights): before", {}, {"rrf": True}),
    (
        "score blend only",
        {
            "NEIGHBOUR_WEIGHT": 0,
            "EPISODE_WEIGHT": 0,
            "DATE_WEIGHT": 0,
            "TAG_WEIGHT": 0,
            "RECENCY_WEIGHT": 0,
        },
        {},
    ),
    ("full ranking (the default)", {}, {}),
    ("without timeline neighbours", {"NEIGHBOUR_WEIGHT": 0}, {}),
    ("without episode", {"EPISODE_WEIGHT": 0}, {}),
    ("without question dates", {"DATE_WEIGHT": 0}, {}),
    ("without tag values named in the question", {"TAG_WEIGHT": 0}, {}),
    ("without recency", {"RECENCY_WEIGHT": 0}, {}),
    ("text share 0.5 (instead of 0.3)", {"TEXT_SHARE": 0.5}, {}),
    ("full text only, full ranking", {}, {"stages": "text"}),
    ("vector only, full ranking", {}, {"stages": "vector"}),
]


def _mean(values: list[float]) -> str:
    return f"{sum(values) / max(len(values), 1):.3f}"


def main() -> None:
    corpus = Corpus()
    projects = sorted({p for p, _ in corpus.questions})
    lines = []
    print("recall@10, nDCG@10, and recall@10 / nDCG@10 per category:\n")
    print("| variant | recall@10 | nDCG@10 | " + " | ".join(CATEGORIES.values()) + " |")
    print("|---|---|---|" + "---|" * len(CATEGORIES))
    for name, changed, how in VARIANTS:
        with weights(**changed):
            rows = []
            for q, (project, qa) in enumerate(corpus.questions):
                found = find(corpus, q, **how)
                rows.append((project, qa["category"], metrics(found, qa["evidence"])))
        cats = [
            _mean([m[1] for _, cat, m in rows if cat == c])
            + " / "
            + _mean([m[2] for _, cat, m in rows if cat == c])
            for c in CATEGORIES
        ]
        overall = f"{_mean([m[1] for *_, m in rows])} | {_mean([m[2] for *_, m in rows])}"
        print(f"| {name} | {overall} | " + " | ".join(cats) + " |", flush=True)
        convs = [_mean([m[1] for p, _, m in rows if p == project]) for project in projects]
        lines.append(f"| {name} | " + " | ".join(convs) + " |")
    print("\nrecall@10 by conversation:\n")
    print("| variant | " + " | ".join(projects) + " |")
    print("|---|" + "---|" * len(projects))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
