"""Offline summarizers: passthrough, truncate, first paragraph, extractive."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from app.providers.summarization.base import RelatedNote

_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")
_WORD = re.compile(r"[a-z0-9][a-z0-9'-]*")
_STOP_WORDS = (
    "a an and are as at be been but by can could did do does for from had has have he her his "
    "i if in into is it its me my no not of on or our she so than that the their them then "
    "there these they this to too us was we were what when which who will with would you your "
    "about after also all any because before being both each few more most other over same "
    "should some such through under until up very while just"
)
_STOP = frozenset(_STOP_WORDS.split())


def cut(text: str, max_chars: int) -> str:
    """At most ``max_chars``, cut at a word boundary, with ``...`` when cut."""
    text = " ".join(text.split())
    if len(text) <= max_chars:
        return text
    head = text[: max_chars - 3]
    if " " in head[max_chars // 2 :]:
        head = head[: head.rfind(" ")]
    return head.rstrip(" ,;:") + "..."


class _Local:
    uses_context = False
    name = "local"

    def __init__(self, **_: Any) -> None:
        pass

    async def aclose(self) -> None:
        return None


class Passthrough(_Local):
    """The text itself (for short text; longer text is cut to the limit)."""

    name = "passthrough"

    async def summarize(
        self,
        text: str,
        *,
        max_chars: int,
        context: Sequence[RelatedNote] = (),
        system: str | None = None,
    ) -> str:
        return text if len(text) <= max_chars else cut(text, max_chars)


class Truncate(_Local):
    name = "truncate"

    async def summarize(
        self,
        text: str,
        *,
        max_chars: int,
        context: Sequence[RelatedNote] = (),
        system: str | None = None,
    ) -> str:
        return cut(text, max_chars)


def _strip_markup(text: str) -> str:
    text = re.sub(r"^---\n.*?\n---\n", "", text, flags=re.S)  # front matter
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    text = re.sub(r"^#{1,6}\s*", "", text, flags=re.M)
    return text


class FirstParagraph(_Local):
    name = "first_paragraph"

    async def summarize(
        self,
        text: str,
        *,
        max_chars: int,
        context: Sequence[RelatedNote] = (),
        system: str | None = None,
    ) -> str:
        for block in re.split(r"\n\s*\n", _strip_markup(text)):
            if len(block.split()) >= 4:
                return cut(block, max_chars)
        return cut(text, max_chars)


def sentences(text: str) -> list[str]:
    out: list[str] = []
    for block in re.split(r"\n\s*\n", _strip_markup(text)):
        flat = " ".join(block.split())
        out.extend(s.strip() for s in _SENTENCE_END.split(flat) if len(s.split()) >= 3)
    return out


class Extractive(_Local):
    """Real sentences of the text: those most central to its vocabulary.

    Each sentence scores the mean TF-IDF weight of its content words (IDF over
    the document's sentences, so words that recur across the text count, and
    words every sentence has do not), with a small bonus for coming early.
    The best sentences are returned in their original order, within the limit.
    """

    name = "extractive"

    async def summarize(
        self,
        text: str,
        *,
        max_chars: int,
        context: Sequence[RelatedNote] = (),
        system: str | None = None,
    ) -> str:
        found = sentences(text)
        if not found:
            return cut(text, max_chars)
        bags = [[w for w in _WORD.findall(s.lower()) if w not in _STOP] for s in found]
        freq = Counter(w for bag in bags for w in bag)
        df = Counter(w for bag in bags for w in set(bag))
        n = len(found)
        scores = []
        for i, bag in enumerate(bags):
            if not bag:
                scores.append(0.0)
                continue
            weight = sum(freq[w] * math.log(1 + n / df[w]) for w in bag) / len(bag) ** 0.7
            scores.append(weight * (1.0 + 0.5 / (1 + i)))
        ranked = sorted(range(n), key=lambda i: -scores[i])
        chosen: list[int] = []
        used = 0
        for i in ranked:
            extra = len(found[i]) + (1 if chosen else 0)
            if used + extra <= max_chars:
                chosen.append(i)
                used += extra
        if not chosen:
            return cut(found[ranked[0]], max_chars)
        return " ".join(found[i] for i in sorted(chosen))
