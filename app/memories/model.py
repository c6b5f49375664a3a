"""What a memory is: a note tagged ``memory=<kind>`` with its subject,
attribute and value as tags, its sources as ``references`` edges to the
messages it came from, and, once something newer replaced it,
``superseded_by`` / ``superseded_at``.

Two memories compete when they fill the same *slot*: the same subject and
attribute for an attribute that holds one value at a time (``lives_in``),
the same subject, attribute and value for one that holds many (``likes``:
liking jazz and liking tea do not compete; no longer liking jazz does).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from app.kit.tags import values_of
from app.kit.timeutil import keep_ts, parse_timestamp
from app.notes.views import ItemView

KINDS = ("fact", "preference", "decision", "task", "event")
CERTAINTIES = ("fact", "candidate")
PREFIX = "mem/"
MAX_VALUE = 500
MAX_STATEMENT = 1000

_SPACES = re.compile(r"\s+")
_WORD = re.compile(r"[\w']+")
_ARTICLES = frozenset({"a", "an", "the", "my", "our"})


def one_line(text: str, width: int) -> str:
    return _SPACES.sub(" ", text).strip()[:width]


def subject_key(subject: str) -> str:
    return one_line(subject, 200).casefold()


def attribute_key(attribute: str) -> str:
    """lower_snake_case, as both modes name attributes."""
    words = re.findall(r"[a-z0-9]+", attribute.casefold())
    return "_".join(words)[:64]


# Attributes that hold one value at a time whatever a model says, and the
# names models (and people) give them: one slot however it is named.
SINGLE = frozenset(
    [
        "lives_in",
        "hometown",
        "works_at",
        "job_title",
        "name",
        "age",
        "relationship_status",
        "project_name",
        "email",
        "phone",
        "timezone",
        "birthday",
    ]
)
ALIASES = {
    **dict.fromkeys(
        [
            "location",
            "city",
            "residence",
            "home",
            "lives",
            "home_city",
            "current_city",
            "current_location",
            "lives_at",
            "resides_in",
            "living_in",
            "based_in",
            "moved_to",
        ],
        "lives_in",
    ),
    **dict.fromkeys(["employer", "company", "workplace", "works_for", "work_place"], "works_at"),
    **dict.fromkeys(["job", "occupation", "role", "profession", "title", "position"], "job_title"),
    **dict.fromkeys(["from", "origin", "comes_from", "home_town", "born_in"], "hometown"),
    **dict.fromkeys(["full_name", "called", "named"], "name"),
    **dict.fromkeys(["like", "loves", "enjoys", "favorite", "favourite"], "likes"),
    **dict.fromkeys(["dislike", "hates"], "dislikes"),
    **dict.fromkeys(["preference", "prefer"], "prefers"),
    **dict.fromkeys(["decision", "decides"], "decided"),
    **dict.fromkeys(["task", "to_do", "needs_to"], "todo"),
    **dict.fromkeys(["marital_status", "relationship"], "relationship_status"),
}


def canonical_attribute(attribute: str) -> str:
    key = attribute_key(attribute)
    return ALIASES.get(key, key)


def value_words(value: str) -> list[str]:
    """The value's words, case-folded, without leading articles."""
    words = [w.strip("'") for w in _WORD.findall(value.casefold())]
    words = [w for w in words if w]
    while words and words[0] in _ARTICLES:
        words = words[1:]
    return words


def value_key(value: str) -> str:
    return " ".join(value_words(value))


def same_value(a: str, b: str) -> bool:
    return value_key(a) == value_key(b)


def refines(old: str, new: str) -> bool:
    """``new`` says ``old`` with more words after it ("Berlin" ->
    "Berlin, Germany"): a restatement with detail, not another value."""
    a, b = value_words(old), value_words(new)
    return bool(a) and len(b) > len(a) and b[: len(a)] == a


def stamp(moment: datetime) -> str:
    """A time as memory tags carry it (keep's timestamps: UTC, to the second);
    strings of this form sort as the times do."""
    return keep_ts(moment)


def memory_id(subject: str, attribute: str, value: str, negated: bool, at: datetime) -> str:
    """The same statement at the same time is the same memory (a rerun of an
    extraction writes nothing new); the same value at another time (moved
    back to Berlin) is another."""
    raw = "|".join(
        (subject_key(subject), attribute_key(attribute), value_key(value), str(negated), stamp(at))
    )
    return PREFIX + hashlib.sha256(raw.encode()).hexdigest()[:16]


@dataclass(slots=True)
class Candidate:
    """A memory about to be reconciled: from a model, the rules, or an
    agent that wrote it itself (``remember``)."""

    kind: str
    subject: str
    attribute: str
    value: str
    statement: str
    confidence: float
    single: bool
    at: datetime  # valid time when stated, else when it was said
    certainty: str = "fact"
    negated: bool = False
    sources: list[str] = field(default_factory=list)  # message note ids
    replaces: str | None = None  # a memory id a judge named (checked)
    thread: str = ""
    user: str = ""
    agent: str = ""
    tags: dict[str, Any] = field(default_factory=dict)  # the caller's own

    @property
    def slot(self) -> tuple[str, str, str]:
        return slot_of(self.subject, self.attribute, self.value, self.single)

    @property
    def id(self) -> str:
        return memory_id(self.subject, self.attribute, self.value, self.negated, self.at)

    def note_tags(self) -> dict[str, Any]:
        tags: dict[str, Any] = {**self.tags}
        tags |= {
            "memory": self.kind,
            "subject": self.subject,
            "attribute": attribute_key(self.attribute),
            "value": self.value,
            "cardinality": "one" if self.single else "many",
            "certainty": self.certainty,
            "confidence": f"{self.confidence:.2f}",
        }
        if self.negated:
            tags["negated"] = "true"
        if self.sources:
            tags["references"] = list(dict.fromkeys(self.sources))
        for key, value in (("thread", self.thread), ("user", self.user), ("agent", self.agent)):
            if value:
                tags[key] = value
        return tags


def slot_of(subject: str, attribute: str, value: str, single: bool) -> tuple[str, str, str]:
    return (subject_key(subject), attribute_key(attribute), "" if single else value_key(value))


def _first(tags: dict[str, Any], key: str) -> str:
    values = values_of(tags.get(key), key) if tags.get(key) is not None else []
    return values[0] if values else ""


@dataclass(slots=True)
class Memory:
    """A memory note read back."""

    id: str
    kind: str
    subject: str
    attribute: str
    value: str
    statement: str
    confidence: float
    certainty: str
    single: bool
    negated: bool
    at: datetime
    updated_at: str
    sources: list[str]
    superseded_by: str | None
    superseded_at: str | None
    thread: str
    user: str
    agent: str
    tags: dict[str, Any]

    @property
    def current(self) -> bool:
        return self.superseded_by is None

    @property
    def slot(self) -> tuple[str, str, str]:
        return slot_of(self.subject, self.attribute, self.value, self.single)

    def believed_at(self, moment: datetime) -> bool:
        """Whether this was the belief at ``moment``."""
        if self.at > moment:
            return False
        return self.superseded_at is None or self.superseded_at > stamp(moment)

    @classmethod
    def of(cls, view: ItemView) -> Memory | None:
        tags = view.tags
        kind = _first(tags, "memory")
        if kind not in KINDS:
            return None
        try:
            confidence = float(_first(tags, "confidence") or 0.5)
        except ValueError:
            confidence = 0.5
        return cls(
            id=view.id,
            kind=kind,
            subject=_first(tags, "subject"),
            attribute=_first(tags, "attribute"),
            value=_first(tags, "value"),
            statement=view.summary,
            confidence=max(0.0, min(1.0, confidence)),
            certainty=_first(tags, "certainty") or "fact",
            single=_first(tags, "cardinality") == "one",
            negated=_first(tags, "negated") == "true",
            at=parse_timestamp(view.created_at),
            updated_at=view.updated_at,
            sources=values_of(tags.get("references"), "references") if "references" in tags else [],
            superseded_by=_first(tags, "superseded_by") or None,
            superseded_at=_first(tags, "superseded_at") or None,
            thread=_first(tags, "thread"),
            user=_first(tags, "user"),
            agent=_first(tags, "agent"),
            tags=tags,
        )
