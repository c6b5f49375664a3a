"""How find orders what its stages found: pure functions, no SQL.

A candidate's **relevance** blends its two stage scores (not their ranks):
``TEXT_SHARE * text * meaning + (1 - TEXT_SHARE) * cosine``, where ``text``
is its share of the question (its BM25 over what a note holding every
searched word once scores) and ``meaning`` lets a word in common count as
far as the note is close in meaning (``relevance``). Reciprocal rank fusion
threw the scores away: a note far ahead in one stage counted the same as one
barely ahead, and on LoCoMo the fused list lost to full text alone.

Then **context**, because memories are episodes, not isolated facts — but
only where there is evidence that notes belong together. Being written next
to each other, or in the same minute, is not evidence by itself: an agent's
store is often unrelated notes written in bursts, and a conversation shuffled
into one moment looks exactly like one. Evidence is:

* a **grouping tag**: a key whose value notes next to each other on the
  timeline share more often than two candidates drawn at random do, beyond
  chance's own spread (``_grouping_keys``: a kappa measured on the find's
  candidates, 0 for a speaker in a dialogue, a tag every note carries or any
  tag of a shuffled stream, near 1 for a session or a thread); its strength
  is the evidence;
* a **tag naming the other note** (a reply, a link): full evidence;
* for episodes, **time**, weighed by how few of the candidates the window
  holds: a window that holds every candidate (a burst, an import stamped with
  one time) says nothing.

With it:

* a note gains ``NEIGHBOUR_WEIGHT`` x the relevance of a timeline neighbour
  (the note just before or after it: in a conversation the answer is often
  the turn after the one that matches the question) x the evidence that the
  two belong together, the best such neighbour;
* and ``EPISODE_WEIGHT`` x the best relevance in its episode, weighed by the
  episode's evidence (created within ``EPISODE_GAP`` of it; with a grouping
  tag, sharing its value) — at least its own relevance: a note is its own
  episode;
* a question that names a date ("on 8 May, 2023", "in July 2023",
  "2023-05-08") adds ``DATE_WEIGHT`` to notes created then;
* a question that names one of a note's tag values (a speaker, a topic)
  adds ``TAG_WEIGHT`` to a note that context lifts: among a hit's neighbours
  it prefers the one the question names (full text cannot, when the value is
  on so many notes that its word carries no weight); alone, a name on half
  the notes is no evidence (measured: it cost recall in a shuffled stream);
* and all four only as far as the note itself has evidence of relevance
  (``own_evidence``): fully with a word in common with the question, else
  by its cosine from nothing at ``FLOOR`` to all at twice ``FLOOR``. A note
  that shares no word and no meaning with the question keeps its own small
  relevance and nothing else, whatever its time, tags or neighbours.
* **recency** is a bounded bonus, not a multiplier: up to ``RECENCY_WEIGHT``
  for the newest candidate, halving every ``half_life`` days older than it.
  Of two equally relevant notes the newer wins; an imported history is not
  turned into a sort by date (a multiplier on scores did that: recall@10 on
  LoCoMo fell from 0.60 to 0.22 with keep's 30-day half-life).

**What a score is.** ``(relevance + bonuses) / SCALE``, where ``SCALE =
1 + EPISODE_WEIGHT + RECENCY_WEIGHT`` is what a lone perfect match earns (the
newest note, its own episode): such a note scores 1.0; context can lift a
note above that, and ``shown`` caps what the API reports at 1.0 (the order is
that of the uncapped scores). A note with no word in common with the question
and a cosine below ``FLOOR`` scores at most ``((1 - TEXT_SHARE) x FLOOR +
RECENCY_WEIGHT) / SCALE`` (0.05); with no context a score is about the
note's relevance. Scores are comparable within one find, and keep's
``query-resolve`` reads their margin and spread as they are.

The weights were chosen by leave-one-conversation-out cross-validation
(``bench/locomo_cv.py``: choose on four LoCoMo conversations, score the
fifth), among those that keep precision@1 >= 0.9 on a store of another kind
(``bench/unrelated.py``'s unrelated notes written in bursts). BENCHMARKS.md
has each fold, the stream variant and what was tried and rejected.
"""

from __future__ import annotations

import bisect
import itertools
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

Key = tuple[str, str, int]  # note id, kind (note | part | version), part or version number

TEXT_SHARE = 0.4
NEIGHBOUR_WEIGHT = 0.5
EPISODE_WEIGHT = 0.6
EPISODE_GAP = timedelta(hours=1)
DATE_WEIGHT = 0.2
TAG_WEIGHT = 0.05
RECENCY_WEIGHT = 0.02
CONTEXT_FROM = 20  # the best candidates whose timeline neighbours are looked up
FLOOR = 0.1  # below this cosine (and no word in common) a note earns no bonus
SCALE = 1.0 + EPISODE_WEIGHT + RECENCY_WEIGHT


@dataclass(slots=True)
class Candidate:
    key: Key
    created_at: datetime
    updated_at: datetime
    text: float | None = None  # BM25 score, when the full-text stage found it
    cosine: float | None = None  # similarity to the question's vector
    tags: frozenset[str] = frozenset()  # the note's tags as key=value terms, case-folded
    context_only: bool = False  # no stage found it: a hit's timeline neighbour
    embedded: bool = True  # False: no vector yet (its cosine of 0 says nothing)


@dataclass(frozen=True, slots=True)
class Question:
    """What find reads from the question itself, beyond its words' stages."""

    dates: tuple[tuple[datetime, datetime], ...] = ()
    words: frozenset[str] = frozenset()
    # what a note holding each of its searched words once scores in BM25 (the
    # full-text stage's ``full_match``; 0 when that stage did not run)
    full_match: float = 0.0

    @classmethod
    def read(cls, question: str) -> Question:
        return cls(
            dates=tuple(question_dates(question)),
            words=frozenset(_WORD.findall(question.casefold())),
        )

    def names(self, tags: frozenset[str]) -> bool:
        """Whether the question names the value of one of these ``key=value``
        tags (all its words, and at least one word of three letters or more:
        not "a", "1" or "no")."""
        for term in tags:
            words = _WORD.findall(term.partition("=")[2].casefold())
            if words and set(words) <= self.words and any(len(w) >= 3 for w in words):
                return True
        return False


_WORD = re.compile(r"[^\W_]+")


def relevance(
    found: Iterable[Candidate], stages: str, *, full_match: float = 0.0
) -> dict[Key, float]:
    """Each candidate's blend of its stage scores, in [0, 1].

    Its full-text score is its share of the question's words: BM25 over what
    a full match scores (``full_match``), or over the best candidate's BM25
    when that is higher. One word of a four-word question is not a full
    match, however rare it is. In a blend with the vector stage, a word in
    common counts as far as the note is close in meaning, fully from cosine
    ``FLOOR``: a stray word ("long" in "a long-form podcast" for "how long
    should my replies be?") does not outrank the note that means the answer."""
    found = list(found)
    best = max((c.text for c in found if c.text), default=0.0)
    best = max(best, full_match)

    def text(c: Candidate) -> float:
        return (c.text or 0.0) / best if best > 0 else 0.0

    def cosine(c: Candidate) -> float:
        return max(c.cosine or 0.0, 0.0)

    if stages == "text":
        return {c.key: text(c) for c in found}
    if stages == "vector":
        return {c.key: cosine(c) for c in found}
    return {c.key: TEXT_SHARE * text(c) * _meaning(c) + (1 - TEXT_SHARE) * cosine(c) for c in found}


def _meaning(c: Candidate) -> float:
    """How far a word in common counts in a blend: 0 at cosine 0, 1 from FLOOR
    (fully for a note not embedded yet: its cosine says nothing)."""
    if FLOOR <= 0 or not c.embedded:
        return 1.0
    return min(max((c.cosine or 0.0) / FLOOR, 0.0), 1.0)


@dataclass(slots=True)
class Explained:
    """How a candidate's score came about (find's ``explain``): the stage
    scores, the relevance they blend to, and each bonus, before the division
    by ``SCALE`` (``score`` is after it, before bias and capping)."""

    bm25: float | None  # the full-text stage's raw score, when it found the candidate
    text: float  # bm25 over what a full match scores (or the best bm25, when higher)
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
    notes = {k[0]: found[k] for k in base if k[1] == "note"}
    adjacent: dict[str, set[str]] = {}  # both ways: a hit lifts its neighbours and back
    for note_id, pair in neighbours.items():
        for other in pair:
            if other is not None and other in notes and note_id in notes:
                adjacent.setdefault(note_id, set()).add(other)
                adjacent.setdefault(other, set()).add(note_id)
    grouping = _grouping_keys(notes)
    lifted: dict[Key, float] = {}  # the evidence behind each note's episode
    episode = _episode_best(found, base, grouping, lifted)
    newest = max((c.updated_at for c in found.values()), default=None)
    best_text = 0.0  # only an explanation needs it (relevance normalised already)
    if explain is not None:
        best_text = max((c.text for c in found.values() if c.text), default=0.0)
        best_text = max(best_text, question.full_match)
    out: dict[Key, float] = {}
    for key, relevant in base.items():
        c = found[key]
        if c.context_only and relevant <= 0:
            continue  # no word in common, no closeness in meaning: context lifts
            # results, it does not make them
        near = around = on_date = named = recent = context = 0.0
        if key[1] == "note":
            pairs = [
                (note_base[n], _together(c, notes[n], grouping)) for n in adjacent.get(key[0], ())
            ]
            near = NEIGHBOUR_WEIGHT * max((r * e for r, e in pairs), default=0.0)
            around = EPISODE_WEIGHT * episode.get(key, 0.0)
            # how strong the evidence behind the context that lifts it
            context = max([e for r, e in pairs if r * e > 0] + [lifted.get(key, 0.0)])
        if any(start <= c.created_at < end for start, end in question.dates):
            on_date = DATE_WEIGHT
        if c.tags and question.names(c.tags):
            named = TAG_WEIGHT * context
        if half_life_days > 0 and newest is not None:
            age = max((newest - c.updated_at).total_seconds(), 0.0) / 86400
            recent = RECENCY_WEIGHT * 0.5 ** (age / half_life_days)
        g = own_evidence(c)
        near, around, on_date, named = g * near, g * around, g * on_date, g * named
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


def own_evidence(c: Candidate) -> float:
    """How far a candidate may take bonuses: fully with a word in common
    with the question, else by its closeness in meaning, from nothing at
    cosine ``FLOOR`` (MiniLM's unrelated texts sit below it) to all at twice
    ``FLOOR``. What shares no word and no meaning with the question keeps
    its own small relevance and nothing more, whatever its time or tags."""
    if c.text or FLOOR <= 0:
        return 1.0
    return min(max(((c.cosine or 0.0) - FLOOR) / FLOOR, 0.0), 1.0)


def _grouping_keys(notes: Mapping[str, Candidate]) -> dict[str, float]:
    """How strongly each tag key groups notes on this timeline: how much
    more often notes next to each other share its value than two candidates
    drawn at random do. The pairs are the candidates in timeline order
    (created, then natural id), each with the next one within EPISODE_GAP:
    hundreds of pairs, not the few dozen around the best hits. A kappa,
    ``(observed - chance - spread) / (1 - chance)`` with ``spread`` chance's
    own standard error over that many pairs (sharing within it is noise); 0
    when no more often: a speaker in a dialogue, a tag every note carries,
    any tag of a shuffled stream. Near 1 for a session or a thread."""
    line = sorted(notes.values(), key=lambda c: (c.created_at, natural_key(c.key[0])))
    pairs = {
        (a.key[0], b.key[0])
        for a, b in itertools.pairwise(line)
        if b.created_at - a.created_at <= EPISODE_GAP
    }
    values: dict[str, dict[str, set[str]]] = {}  # key -> note -> its values
    for note_id, c in notes.items():
        for term in c.tags:
            k, _, v = term.partition("=")
            values.setdefault(k, {}).setdefault(note_id, set()).add(v)
    if not pairs:
        return {}
    out: dict[str, float] = {}
    for k, held in values.items():
        observed = sum(1 for a, b in pairs if held.get(a, set()) & held.get(b, set())) / len(pairs)
        counts: dict[str, int] = {}
        for vs in held.values():
            for v in vs:
                counts[v] = counts.get(v, 0) + 1
        expected = min(sum((n / len(notes)) ** 2 for n in counts.values()), 1.0)
        # chance's own spread over this many pairs: sharing within it is noise
        spread = math.sqrt(expected * (1.0 - expected) / len(pairs))
        if expected < 1.0 and observed > expected + spread:
            out[k] = (observed - expected - spread) / (1.0 - expected)
    return out


def natural_key(note_id: str) -> str:
    """The timeline's tiebreak (``keepmem_natural_key``, migration 0010): runs
    of digits compare as numbers, so chat:9 comes before chat:10."""
    return _DIGITS.sub(lambda m: m.group().zfill(20) if len(m.group()) < 20 else m.group(), note_id)


_DIGITS = re.compile(r"[0-9]+")


def _together(a: Candidate, b: Candidate, grouping: Mapping[str, float]) -> float:
    """Evidence that two notes belong together: 1 when one's tag names the
    other (a reply, a link), else the strongest grouping key whose value
    they share (0 when none: being written next to each other is not
    evidence by itself)."""
    if _names(a, b) or _names(b, a):
        return 1.0
    shared = a.tags & b.tags
    return max((grouping.get(t.partition("=")[0], 0.0) for t in shared), default=0.0)


def _names(a: Candidate, b: Candidate) -> bool:
    target = b.key[0].casefold()
    return any(t.partition("=")[2] == target for t in a.tags)


def shown(score: float) -> float:
    """The score the API reports: at most 1.0, six decimals."""
    return round(min(score, 1.0), 6)


def _episode_best(
    found: Mapping[Key, Candidate],
    base: Mapping[Key, float],
    grouping: Mapping[str, float] | None = None,
    evidence: dict[Key, float] | None = None,
) -> dict[Key, float]:
    """For each note: the best relevance in its episode, weighed by the
    evidence that the episode is one (its own relevance at least: a note is
    its own episode). Two kinds of evidence, the stronger counts:

    * time: the notes created within EPISODE_GAP, weighed by how few of the
      candidates that window holds (a window with every candidate in it —
      a burst, an import stamped with one time — says nothing);
    * a grouping tag (``_grouping_keys``): the notes within EPISODE_GAP that
      share its value, weighed by how strongly the key groups.

    With ``evidence``, it records for each note another note lifted the
    weight of the evidence that did (0 when its own relevance stands).

    Range maxima over time-sorted notes: a big import stamped with one time
    is one window of thousands, not thousands squared of comparisons."""
    out: dict[Key, float] = {}
    ev: dict[Key, float] = {} if evidence is None else evidence
    line = sorted((found[k].created_at, k) for k in base if k[1] == "note")

    def lift(key: Key, value: float, weight: float) -> None:
        if value > out.get(key, base[key]):  # a note is its own episode
            out[key], ev[key] = value, weight
        else:
            out.setdefault(key, base[key])
            ev.setdefault(key, 0.0)

    for key, best, share in _windows(line, base):
        lift(key, best * (1.0 - share), 1.0 - share)
    for k, strength in (grouping or {}).items():
        groups: dict[str, list[tuple[datetime, Key]]] = {}
        for at, key in line:
            for term in found[key].tags:
                key_, _, value = term.partition("=")
                if key_ == k:
                    groups.setdefault(value, []).append((at, key))
        for members in groups.values():
            for key, best, _ in _windows(members, base):
                lift(key, strength * best, strength)
    return out


def _windows(
    line: list[tuple[datetime, Key]], base: Mapping[Key, float]
) -> Iterable[tuple[Key, float, float]]:
    """For each note of a time-sorted line: the best relevance within
    EPISODE_GAP of it, and the share of the line that window holds."""
    times = [t for t, _ in line]
    best = _range_max([base[k] for _, k in line])
    for at, key in line:
        lo = bisect.bisect_left(times, at - EPISODE_GAP)
        hi = bisect.bisect_right(times, at + EPISODE_GAP)
        yield key, best(lo, hi), (hi - lo) / len(line)


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
