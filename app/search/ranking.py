"""How find orders what its stages found: pure functions, no SQL.

A candidate's **relevance** blends its two stage scores (not their ranks):
``TEXT_SHARE * bm25 / best_bm25 + (1 - TEXT_SHARE) * cosine``. Reciprocal rank
fusion threw the scores away: a note far ahead in one stage counted the same
as one barely ahead, and on LoCoMo the fused list lost to full text alone.

Then **context**, because memories are episodes, not isolated facts:

* a note gains ``NEIGHBOUR_WEIGHT`` x the relevance of its best timeline
  neighbour (the note just before or after it: in a conversation the answer is
  often the turn after the one that matches the question);
* and ``EPISODE_WEIGHT`` x the best relevance among candidates created within
  ``EPISODE_GAP`` of it (the same session or task);
* a question that names a date ("on 8 May, 2023", "in July 2023",
  "2023-05-08") adds ``DATE_WEIGHT`` to notes created then;
* a question that names one of a note's tag values (a speaker, a topic)
  adds ``TAG_WEIGHT``: full text cannot, when the value is on so many notes
  that its word carries no weight;
* **recency** is a bounded bonus, not a multiplier: up to ``RECENCY_WEIGHT``
  for the newest candidate, halving every ``half_life`` days older than it.
  Of two equally relevant notes the newer wins; an imported history is not
  turned into a sort by date (a multiplier on scores did that: recall@10 on
  LoCoMo fell from 0.60 to 0.22 with keep's 30-day half-life).

The weights were chosen on ``bench/locomo.py`` (BENCHMARKS.md has each
one's worth). Scores are divided by what a lone perfect match earns
(``1 + EPISODE_WEIGHT + RECENCY_WEIGHT``: the newest note, its own
episode's best), so such a note scores 1.0; context can lift a note above
that, and ``shown`` caps what the API reports at 1.0 (the order is that of
the uncapped scores).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

Key = tuple[str, str, int]  # note id, kind (note | part | version), part or version number

TEXT_SHARE = 0.3
NEIGHBOUR_WEIGHT = 0.5
EPISODE_WEIGHT = 0.3
EPISODE_GAP = timedelta(hours=1)
DATE_WEIGHT = 0.2
TAG_WEIGHT = 0.05
RECENCY_WEIGHT = 0.02
CONTEXT_FROM = 20  # the best candidates whose timeline neighbours are looked up
SCALE = 1.0 + EPISODE_WEIGHT + RECENCY_WEIGHT


@dataclass(slots=True)
class Candidate:
    key: Key
    created_at: datetime
    updated_at: datetime
    text: float | None = None  # BM25 score, when the full-text stage found it
    cosine: float | None = None  # similarity to the question's vector
    tags: frozenset[str] = frozenset()  # the note's tag values, case-folded
    context_only: bool = False  # no stage found it: a hit's timeline neighbour


@dataclass(frozen=True, slots=True)
class Question:
    """What find reads from the question itself, beyond its words' stages."""

    dates: tuple[tuple[datetime, datetime], ...] = ()
    words: frozenset[str] = frozenset()

    @classmethod
    def read(cls, question: str) -> Question:
        return cls(
            dates=tuple(question_dates(question)),
            words=frozenset(_WORD.findall(question.casefold())),
        )

    def names(self, tag_values: frozenset[str]) -> bool:
        """Whether the question names one of these values (all its words, and
        at least one word of three letters or more: not "a", "1" or "no")."""
        for value in tag_values:
            words = _WORD.findall(value.casefold())
            if words and set(words) <= self.words and any(len(w) >= 3 for w in words):
                return True
        return False


_WORD = re.compile(r"[^\W_]+")


def relevance(found: Iterable[Candidate], stages: str) -> dict[Key, float]:
    """Each candidate's blend of its stage scores, in [0, 1]."""
    found = list(found)
    best = max((c.text for c in found if c.text), default=0.0)

    def text(c: Candidate) -> float:
        return (c.text or 0.0) / best if best > 0 else 0.0

    def cosine(c: Candidate) -> float:
        return max(c.cosine or 0.0, 0.0)

    if stages == "text":
        return {c.key: text(c) for c in found}
    if stages == "vector":
        return {c.key: cosine(c) for c in found}
    return {c.key: TEXT_SHARE * text(c) + (1 - TEXT_SHARE) * cosine(c) for c in found}


@dataclass(slots=True)
class Explained:
    """How a candidate's score came about (find's ``explain``): the stage
    scores, the relevance they blend to, and each bonus, before the division
    by ``SCALE`` (``score`` is after it, before bias and capping)."""

    bm25: float | None  # the full-text stage's raw score, when it found the candidate
    text: float  # bm25 over the best bm25 among the candidates
    vector: float | None  # cosine similarity to the question (or the anchor)
    relevance: float  # the blend of text and vector for the stages used
    neighbour: float = 0.0  # NEIGHBOUR_WEIGHT x the best timeline neighbour's relevance
    episode: float = 0.0  # EPISODE_WEIGHT x the best relevance within EPISODE_GAP
    date: float = 0.0  # DATE_WEIGHT when created on a date the question names
    tag: float = 0.0  # TAG_WEIGHT when the question names one of its tag values
    recency: float = 0.0  # the recency bonus
    score: float = 0.0  # the sum over SCALE
    context_only: bool = False  # joined as a hit's neighbour; no stage found it


def rank(
    found: Mapping[Key, Candidate],
    base: Mapping[Key, float],
    *,
    neighbours: Mapping[str, tuple[str | None, str | None]],
    question: Question,
    half_life_days: float,
    explain: dict[Key, Explained] | None = None,
) -> dict[Key, float]:
    """Final scores: relevance plus context, dates and recency, over SCALE.
    With ``explain``, each scored candidate's parts are recorded there."""
    note_base = {k[0]: v for k, v in base.items() if k[1] == "note"}
    adjacent: dict[str, set[str]] = {}  # both ways: a hit lifts its neighbours and back
    for note_id, pair in neighbours.items():
        for other in pair:
            if other is not None:
                adjacent.setdefault(note_id, set()).add(other)
                adjacent.setdefault(other, set()).add(note_id)
    episode = _episode_best(found, base)
    newest = max((c.updated_at for c in found.values()), default=None)
    best_text = 0.0  # only an explanation needs it (relevance normalised already)
    if explain is not None:
        best_text = max((c.text for c in found.values() if c.text), default=0.0)
    out: dict[Key, float] = {}
    for key, relevant in base.items():
        c = found[key]
        if c.context_only and relevant <= 0:
            continue  # no word in common, no closeness in meaning: context lifts
            # results, it does not make them
        near = around = on_date = named = recent = 0.0
        if key[1] == "note":
            near = NEIGHBOUR_WEIGHT * max(
                (note_base.get(n, 0.0) for n in adjacent.get(key[0], ())), default=0.0
            )
            around = EPISODE_WEIGHT * episode.get(key, 0.0)
        if any(start <= c.created_at < end for start, end in question.dates):
            on_date = DATE_WEIGHT
        if c.tags and question.names(c.tags):
            named = TAG_WEIGHT
        if half_life_days > 0 and newest is not None:
            age = max((newest - c.updated_at).total_seconds(), 0.0) / 86400
            recent = RECENCY_WEIGHT * 0.5 ** (age / half_life_days)
        out[key] = (relevant + near + around + on_date + named + recent) / SCALE
        if explain is not None:
            explain[key] = Explained(
                bm25=c.text,
                text=(c.text or 0.0) / best_text if best_text > 0 else 0.0,
                vector=c.cosine,
                relevance=relevant,
                neighbour=near,
                episode=around,
                date=on_date,
                tag=named,
                recency=recent,
                score=out[key],
                context_only=c.context_only,
            )
    return out


def shown(score: float) -> float:
    """The score the API reports: at most 1.0, six decimals."""
    return round(min(score, 1.0), 6)


def _episode_best(found: Mapping[Key, Candidate], base: Mapping[Key, float]) -> dict[Key, float]:
    """For each note: the best relevance among notes created within EPISODE_GAP
    (range maxima over the time-sorted notes: a big import stamped with one
    time is one window of thousands, not thousands squared of comparisons)."""
    notes = sorted((found[k].created_at, k) for k in base if k[1] == "note")
    times = [t for t, _ in notes]
    best = _range_max([base[k] for _, k in notes])
    out: dict[Key, float] = {}
    for at, key in notes:
        lo = bisect.bisect_left(times, at - EPISODE_GAP)
        hi = bisect.bisect_right(times, at + EPISODE_GAP)
        out[key] = best(lo, hi)
    return out


def _range_max(values: list[float]) -> Callable[[int, int], float]:
    """max(values[lo:hi]) in constant time (a sparse table)."""
    table = [values]
    width = 1
    while width * 2 <= len(values):
        row = table[-1]
        table.append([max(row[i], row[i + width]) for i in range(len(row) - width)])
        width *= 2

    def query(lo: int, hi: int) -> float:
        level = (hi - lo).bit_length() - 1
        return max(table[level][lo], table[level][hi - (1 << level)])

    return query


# -- dates named in a question ------------------------------------------------------

_MONTHS = {
    name: i
    for i, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
_MONTH = r"(?P<{0}>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<{0}>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<{0}>(?:1[89]|2\d)\d\d)"
_DATES = re.compile(
    "|".join(
        (
            # 8 May 2023, 8th of May, 2023
            rf"\b{_DAY.format('d1')}\s+(?:of\s+)?{_MONTH.format('m1')},?\s+{_YEAR.format('y1')}\b",
            # May 8, 2023
            rf"\b{_MONTH.format('m2')}\s+{_DAY.format('d2')},?\s+{_YEAR.format('y2')}\b",
            # May 2023, May of 2023
            rf"\b{_MONTH.format('m3')},?\s+(?:of\s+)?{_YEAR.format('y3')}\b",
            # 2023-05-08, 2023-05
            rf"\b{_YEAR.format('y4')}-(?P<m4>[01]\d)(?:-(?P<d4>[0-3]\d))?\b",
        )
    ),
    re.IGNORECASE,
)


def question_dates(question: str) -> list[tuple[datetime, datetime]]:
    """The spans of time a question names: a day (with a day's slack either
    side, for time zones) or a month. Dates without a year name no span."""
    spans = []
    for m in _DATES.finditer(question):
        g = m.groupdict()
        year = next(int(g[k]) for k in ("y1", "y2", "y3", "y4") if g[k])
        raw_month = next(g[k] for k in ("m1", "m2", "m3", "m4") if g[k])
        month = int(raw_month) if raw_month.isdigit() else _MONTHS[raw_month.lower()]
        day = next((int(g[k]) for k in ("d1", "d2", "d4") if g[k]), None)
        try:
            if day is None:
                start = datetime(year, month, 1, tzinfo=UTC)
                end = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
            else:
                start = datetime(year, month, day, tzinfo=UTC) - timedelta(days=1)
                end = start + timedelta(days=3)
        except ValueError:  # 31 February: not a date
            continue
        spans.append((start, end))
    return spans
