"""Memory extractors over hosted models: OpenAI-compatible chat completions
and Anthropic messages (the protocol and its dataclasses are in
``app.providers.extraction``).

The model is shown numbered messages and the subject's numbered current
memories and answers one JSON object. Everything in that answer is checked
here before it reaches ``app.memories``: kinds, field widths, and every
message or memory number against what the model was actually shown. A reply
that is not the JSON asked for raises ``MalformedReply`` (transient: the job
retries, then dead-letters) so a garbled answer is never half-applied.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from app.providers.compression import _json_object
from app.providers.errors import TransientError
from app.providers.extraction import KINDS, Extraction, Extractor, Known, Proposed, Said
from app.providers.http import HostedModel, OpenAIChat, anthropic_message

_KIND_CHOICES = " | ".join(f'"{k}"' for k in KINDS)
PROMPT = (
    "You read a conversation and write down what is worth remembering in it: facts, "
    "preferences, decisions, tasks and events about people, projects and things. "
    "The input lists numbered messages, one a line: "
    '"[n] <time> <speaker> (<role>): <text>", then the current memories of the subject, '
    'numbered: "(k) subject | attribute | value | statement". '
    "Reply with ONE JSON object and nothing else: "
    f'{{"memories": [{{"kind": {_KIND_CHOICES}, '
    '"subject": who or what it is about, '
    '"attribute": snake_case, one of lives_in, hometown, works_at, job_title, name, age, '
    "relationship_status, project_name, likes, dislikes, prefers, decided, todo, did "
    "(another snake_case name only when none fits), "
    '"value": string, "statement": one sentence that stands alone, '
    '"confidence": 0 to 1, '
    '"single": true when the attribute holds one value at a time (lives_in), '
    "false when it holds many (likes), "
    '"negated": true when the messages say it is no longer so (a retraction), '
    '"valid_at": ISO-8601 date or null, '
    '"sources": [numbers n of the messages it comes from], '
    '"replaces": number k of a current memory it restates, updates or retracts, or null}]}. '
    "Rules: a first-person statement (I, my, me, we) is about its speaker: use the "
    "speaker's name as the subject. Never invent: write only what the messages say, and "
    "give every memory the numbers of the messages that say it. Set valid_at only when "
    "the text states a time (resolve yesterday or last May against the message's time). "
    "A request to forget or delete a memory k is "
    '{"negated": true, "replaces": k, "sources": [n], ...}: memories are never deleted, '
    'they are superseded. The short form {"op": "delete", "replaces": k, "sources": [n]} '
    "is accepted too and takes the other fields from memory k. "
    'With nothing worth remembering, reply {"memories": []}.'
)
MAX_OUTPUT_TOKENS = 1500
DEFAULT_CONFIDENCE = 0.7
SUBJECT_WIDTH = 200
ATTRIBUTE_WIDTH = 64
VALUE_WIDTH = 500
STATEMENT_WIDTH = 1000


class MalformedReply(TransientError):
    """The reply holds no JSON object with a ``memories`` list. Transient: a
    model may answer properly next time; the job retries, then dead-letters.
    The call was made all the same: its tokens count against the budget."""

    tokens_in: int = 0
    tokens_out: int = 0


# -- what the model is shown --------------------------------------------------------


def _one_line(text: str) -> str:
    # A message's own line breaks could forge a "[7] ..." line of its own:
    # each message is one line, its whitespace collapsed.
    return " ".join(text.split())


def _said_line(s: Said) -> str:
    at, speaker, role, text = (_one_line(f) for f in (s.at, s.speaker, s.role, s.text))
    return f"[{s.n}] {at} {speaker} ({role}): {text}"


def _known_line(k: Known) -> str:
    fields = (k.subject, k.attribute, k.value, k.statement)
    return f"({k.n}) " + " | ".join(_one_line(f) for f in fields)


def render(said: Sequence[Said], known: Sequence[Known], max_chars: int) -> tuple[str, list[Said]]:
    """The model's input and the messages it holds. Over ``max_chars`` the
    oldest messages are left out first, never part of one; the newest is
    always sent (a call without it would be pointless: the caller keeps
    messages to a size). Messages keep their numbers."""
    memories = [_known_line(k) for k in known] or ["none"]
    tail = "\n\nCurrent memories of the subject:\n" + "\n".join(memories)
    head = "Messages:\n"
    room = max_chars - len(head) - len(tail)
    kept: list[Said] = []
    lines: list[str] = []
    for s in reversed(said):
        line = _said_line(s)
        room -= len(line) + 1
        if room < 0 and kept:
            break
        kept.append(s)
        lines.append(line)
    kept.reverse()
    lines.reverse()
    return head + "\n".join(lines) + tail, kept


# -- what the model may answer ------------------------------------------------------


def _text(value: Any, width: int) -> str | None:
    """A field as one trimmed line; None when missing, blank or over ``width``
    (a cut subject or value would be another fact)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)  # "age": 34 says the same as "34"
    if not isinstance(value, str):
        return None
    line = " ".join(value.split())
    return line if line and len(line) <= width else None


def _attribute(value: Any) -> str | None:
    """lower snake_case, ASCII: "Lives In" and "lives-in" are one attribute."""
    if not isinstance(value, str):
        return None
    ascii_only = unicodedata.normalize("NFKD", value).encode("ascii", "ignore").decode()
    name = re.sub(r"[^a-z0-9]+", "_", ascii_only.lower()).strip("_")
    return name if name and len(name) <= ATTRIBUTE_WIDTH else None


def _number(value: Any) -> int | None:
    # JSON true is an int to Python; as a message number it is a mistake.
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _confidence(value: Any) -> float | None:
    if value is None:
        return DEFAULT_CONFIDENCE
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if math.isnan(value):
        return None
    return min(max(float(value), 0.0), 1.0)


def _flag(value: Any, default: bool = False) -> bool | None:
    if value is None:
        return default
    return value if isinstance(value, bool) else None


def _statement(value: Any) -> str:
    # prose: a long one is cut, not refused (the fact is in its fields)
    if not isinstance(value, str):
        return ""
    return " ".join(value.split())[:STATEMENT_WIDTH].rstrip()


def _valid_at(value: Any) -> str | None:
    """An ISO-8601 time as the model wrote it, or None when it is not one."""
    if not isinstance(value, str) or not value.strip():
        return None
    stamp = value.strip()
    try:
        datetime.fromisoformat(stamp[:-1] + "+00:00" if stamp.endswith("Z") else stamp)
    except ValueError:
        return None
    return stamp


class _Reading:
    """One reply's items checked against the numbers the model was shown."""

    def __init__(self, said: Sequence[Said], known: Sequence[Known]) -> None:
        self.messages = {s.n for s in said}
        self.known = {k.n: k for k in known}
        self.dropped = 0

    def sources(self, value: Any) -> list[int]:
        given = value if isinstance(value, list) else [value]
        ids = [_number(v) for v in given]
        valid = [n for n in dict.fromkeys(ids) if n is not None and n in self.messages]
        if valid and any(n is None or n not in self.messages for n in ids):
            self.dropped += 1  # the item stays, with the numbers it was shown
        return valid

    def replaces(self, value: Any) -> int | None:
        if value is None:
            return None
        n = _number(value)
        if n is None or n not in self.known:
            self.dropped += 1  # the item stays, replacing nothing
            return None
        return n

    def item(self, raw: Any) -> Proposed | None:
        """The memory ``raw`` proposes, or None when it is refused."""
        if not isinstance(raw, dict):
            return None
        op = raw.get("op")
        op = op.strip().lower() if isinstance(op, str) else op
        if op not in (None, "add", "update", "delete"):
            return None
        target: Known | None = None
        if op == "delete":
            # A model's "delete" is a retraction of the memory it names:
            # keepmem supersedes, it never deletes.
            named = raw.get("replaces")
            n = _number(raw.get("id") if named is None else named)
            target = self.known.get(n) if n is not None else None
            if target is None:
                return None

        def field(name: str) -> Any:
            # a delete may name only the memory: the rest is the memory's
            value = raw.get(name)
            blank = value is None or (isinstance(value, str) and not value.strip())
            return getattr(target, name) if target is not None and blank else value

        kind = raw.get("kind") or ("fact" if target else None)
        kind = kind.strip().lower() if isinstance(kind, str) else None
        subject = _text(field("subject"), SUBJECT_WIDTH)
        attribute = _attribute(field("attribute"))
        value = _text(field("value"), VALUE_WIDTH)
        confidence = _confidence(raw.get("confidence"))
        single = _flag(raw.get("single"))
        negated = True if target else _flag(raw.get("negated"))
        if kind not in KINDS or subject is None or attribute is None or value is None:
            return None
        if confidence is None or single is None or negated is None:
            return None
        sources = self.sources(raw.get("sources"))
        if not sources:
            return None  # a memory must say which messages it came from
        return Proposed(
            kind=kind,
            subject=subject,
            attribute=attribute,
            value=value,
            statement=_statement(raw.get("statement"))
            or f"{subject} {'no longer ' if negated else ''}{attribute.replace('_', ' ')} {value}",
            confidence=confidence,
            single=single,
            negated=negated,
            valid_at=_valid_at(raw.get("valid_at")),
            sources=sources,
            replaces=target.n if target else self.replaces(raw.get("replaces")),
            certainty="fact",
        )


def parse_reply(
    text: str, said: Sequence[Said], known: Sequence[Known]
) -> tuple[list[Proposed], int]:
    """The memories of a reply and how many refusals validation made (items
    refused, and wrong numbers taken out of items that stay). ``said`` and
    ``known`` are what the model was shown: a number outside them is wrong.
    No JSON object with a ``memories`` list raises ``MalformedReply``."""
    body = _json_object(text)
    items = body.get("memories")
    if not isinstance(items, list):
        raise MalformedReply(
            f"extraction reply has no JSON object with a memories list ({len(text)} chars)"
        )
    reading = _Reading(said, known)
    memories: list[Proposed] = []
    for raw in items:
        made = reading.item(raw)
        if made is None:
            reading.dropped += 1
        else:
            memories.append(made)
    return memories, reading.dropped


# -- the vendors ------------------------------------------------------------------


class _Chat(HostedModel):
    def __init__(self, *, max_input_chars: int = 24_000, **options: Any) -> None:
        super().__init__(max_input_chars=max_input_chars, **options)

    def estimate(self, said: Sequence[Said], known: Sequence[Known]) -> int:
        """Tokens a call may cost at most: one per three characters of what
        is sent (English averages about four), rounded up, plus the most
        the reply may take."""
        text, _kept = render(said, known, self.max_input_chars)
        return self._input_estimate(text) + MAX_OUTPUT_TOKENS

    @staticmethod
    def _input_estimate(text: str) -> int:
        return -(-(len(PROMPT) + len(text)) // 3)

    async def extract(self, said: Sequence[Said], known: Sequence[Known]) -> Extraction:
        """The memories in ``said`` (see ``Extractor.extract``)."""
        text, kept = render(said, known, self.max_input_chars)
        reply, tokens_in, tokens_out = await self._ask(text)
        try:
            memories, dropped = parse_reply(reply, kept, known)
        except MalformedReply as exc:
            exc.tokens_in, exc.tokens_out = tokens_in, tokens_out
            raise
        return Extraction(
            memories=memories, tokens_in=tokens_in, tokens_out=tokens_out, dropped=dropped
        )

    async def _ask(self, text: str) -> tuple[str, int, int]:
        """The reply's text and its input and output tokens."""
        raise NotImplementedError


class OpenAIExtractor(_Chat):
    vendor = "openai"
    default_base = "https://api.openai.com/v1"

    async def _ask(self, text: str) -> tuple[str, int, int]:
        chat = OpenAIChat(
            model=self.model, api_key=self.api_key, base_url=self.base_url, http=self._client
        )
        reply = await chat.reply(
            [{"role": "system", "content": PROMPT}, {"role": "user", "content": text}],
            max_tokens=MAX_OUTPUT_TOKENS,
            temperature=0,
            response_format={"type": "json_object"},
        )
        return (reply.text, *reply.tokens(self._input_estimate(text)))


class AnthropicExtractor(_Chat):
    vendor = "anthropic"
    default_base = "https://api.anthropic.com"

    async def _ask(self, text: str) -> tuple[str, int, int]:
        reply = await anthropic_message(
            self._client,
            self.base_url,
            api_key=self.api_key,
            model=self.model,
            system=PROMPT,
            user=text,
            max_tokens=MAX_OUTPUT_TOKENS,
        )
        return (reply.text, *reply.tokens(self._input_estimate(text)))


def create(provider: str, **options: Any) -> Extractor | None:
    """The configured memory extractor, or None ("none": the rules alone)."""
    if provider == "none":
        return None
    kinds: dict[str, type[_Chat]] = {"openai": OpenAIExtractor, "anthropic": AnthropicExtractor}
    if provider not in kinds:
        raise ValueError(f"unknown memory extractor {provider!r}: use none, openai or anthropic")
    made: Extractor = kinds[provider](**options)
    return made
