"""Memory extraction: what a model reads of a conversation and what it may
answer (``app.memories``). The offline default is not here: it is rules
(``app.memories.rules``). The hosted models (OpenAI-compatible chat
completions, Anthropic messages) live in ``app.providers.extraction_llm``.

The model sees the messages and the subject's current memories numbered
1..N; it answers with numbers, never with note ids, and every number it
returns is checked against what it was shown (a wrong one is dropped).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

KINDS = ("fact", "preference", "decision", "task", "event")


@dataclass(frozen=True, slots=True)
class Said:
    """One message as the extractor reads it."""

    n: int  # 1-based number in this call
    speaker: str
    role: str
    text: str
    at: str  # ISO-8601 time the message was sent
    named: bool = False  # the message named its speaker (a person, not a role or an agent)


@dataclass(frozen=True, slots=True)
class Known:
    """A current memory the model may say a new one restates, replaces or retracts."""

    n: int  # 1-based number in this call
    subject: str
    attribute: str
    value: str
    statement: str


@dataclass(slots=True)
class Proposed:
    """One memory a model (or the rules) read out of the messages."""

    kind: str  # one of KINDS
    subject: str  # who or what it is about (a person's name, "user", a project)
    attribute: str  # snake_case: lives_in, works_at, likes, decided, todo ...
    value: str
    statement: str  # one sentence that stands alone
    confidence: float  # 0-1
    single: bool  # the attribute holds one value at a time (lives_in), not many (likes)
    negated: bool = False  # a retraction: no longer so (also a model's "delete")
    valid_at: str | None = None  # ISO-8601, when the statement names its own time
    sources: list[int] = field(default_factory=list)  # Said.n of the messages it came from
    replaces: int | None = None  # Known.n it restates, updates or retracts
    certainty: str = "fact"  # "fact", or "candidate" (a phrase match, low confidence)


@dataclass(slots=True)
class Extraction:
    memories: list[Proposed] = field(default_factory=list)
    tokens_in: int = 0
    tokens_out: int = 0
    dropped: int = 0  # items of the reply refused by validation (bad ids, kinds, fields)


class Extractor(Protocol):
    name: str
    max_input_chars: int

    def estimate(self, said: Sequence[Said], known: Sequence[Known]) -> int:
        """Tokens a call may cost at most (input and output)."""
        ...

    async def extract(self, said: Sequence[Said], known: Sequence[Known]) -> Extraction:
        """The memories in ``said``. A reply that is not the JSON asked for
        raises ``TransientError`` (the job retries, then dead-letters: nothing
        is half-applied); a bad key or model raises ``PermanentError``."""
        ...

    async def aclose(self) -> None: ...
