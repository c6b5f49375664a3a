"""Where a document's text came from, by character offset: the page, slide,
sheet or cue each stretch of the text was read from.

A reader (``app.ingest.extract``) returns the text and its segments; the
grounding domain cuts passages and labels each with the segments it covers;
citations name them. A segment runs from its ``start`` to the next one's (the
last to the end of the text). ``hard`` segments (a spreadsheet's sheets)
also bound passages: no passage spans two of them.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# What a segment may say about itself, and the JSON types it says it in.
WHERE_KEYS: dict[str, tuple[type, ...]] = {
    "page": (int,),
    "slide": (int,),
    "sheet": (str,),
    "start_s": (int, float),  # a cue's (subtitle, transcript segment) times in seconds
    "end_s": (int, float),
}
MAX_SEGMENTS = 100_000


@dataclass(frozen=True, slots=True)
class Segment:
    start: int  # character offset in the text where this segment begins
    where: Mapping[str, Any] = field(default_factory=dict)  # page, slide, sheet, start_s, end_s
    hard: bool = False  # a passage never crosses into or out of it

    def as_json(self) -> list[Any]:
        return [self.start, dict(self.where), self.hard]


def to_json(segments: Sequence[Segment]) -> list[list[Any]]:
    return [s.as_json() for s in segments]


def from_json(raw: Any) -> list[Segment]:
    """Segments as ``to_json`` wrote them; anything malformed is dropped
    (segments label passages, they never refuse a document)."""
    out: list[Segment] = []
    if not isinstance(raw, list):
        return out
    for item in raw[:MAX_SEGMENTS]:
        if not (isinstance(item, list) and len(item) == 3):
            continue
        start, where, hard = item
        if not isinstance(start, int) or isinstance(start, bool) or start < 0:
            continue
        if not isinstance(where, dict):
            continue
        clean = {
            k: v
            for k, v in where.items()
            if k in WHERE_KEYS and isinstance(v, WHERE_KEYS[k]) and not isinstance(v, bool)
        }
        out.append(Segment(start, clean, bool(hard)))
    out.sort(key=lambda s: s.start)
    return out


def shifted(segments: Iterable[Segment], by: int) -> list[Segment]:
    return [Segment(s.start + by, s.where, s.hard) for s in segments]


def covering(segments: Sequence[Segment], start: int, end: int) -> list[Segment]:
    """The segments the span ``[start, end)`` touches, in order."""
    if not segments:
        return []
    starts = [s.start for s in segments]
    first = max(bisect.bisect_right(starts, start) - 1, 0)
    last = max(bisect.bisect_left(starts, max(end, start + 1)) - 1, first)
    return list(segments[first : last + 1])


def locator(segments: Sequence[Segment], start: int, end: int) -> dict[str, Any]:
    """What a span says about where it is: ``page`` (and ``page_end`` when it
    runs over several), ``slide``/``slide_end``, ``sheet``, ``start_s`` and
    ``end_s`` of the cues it covers."""
    touched = [s for s in covering(segments, start, end) if s.where]
    if not touched:
        return {}
    out: dict[str, Any] = {}
    for key in ("page", "slide"):
        values = [s.where[key] for s in touched if key in s.where]
        if values:
            out[key] = values[0]
            if values[-1] != values[0]:
                out[f"{key}_end"] = values[-1]
    sheets = [s.where["sheet"] for s in touched if "sheet" in s.where]
    if sheets:
        out["sheet"] = sheets[0]
    starts = [s.where["start_s"] for s in touched if "start_s" in s.where]
    ends = [s.where["end_s"] for s in touched if "end_s" in s.where]
    if starts:
        out["start_s"] = starts[0]
    if ends:
        out["end_s"] = ends[-1]
    return out


def hard_bounds(segments: Sequence[Segment], length: int) -> list[tuple[int, int]]:
    """The stretches of a text of ``length`` characters passages must stay
    inside: between hard segments' starts (the whole text when there are none)."""
    cuts = sorted({0, length, *(s.start for s in segments if s.hard and 0 < s.start < length)})
    return [(a, b) for a, b in itertools.pairwise(cuts) if b > a]
