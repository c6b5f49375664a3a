"""Auto-tagging: after a note is written, the project's model picks values
of the project's constrained tags for it.

Off unless the project's settings say ``"auto_tag": true``, and only with a
hosted summarization model (``KEEPMEM_SUMMARIZATION_PROVIDER=openai`` or
``anthropic``): offline, nothing is classified and nothing is guessed. The
label set is the project's own: each ``.tag/<key>`` note tagged
``_constrained: "true"`` is a tag, each ``.tag/<key>/<value>`` note one of its
values, and their ``## Prompt`` sections (else their text) describe them to
the model; a tag doc's ``_when`` predicate limits it to the notes it holds
for, as in keep. The instructions are the project's ``.prompt/tag/*`` doc
(chosen as summaries' are), whose ``{taxonomy}``, ``{valid_values}`` and
``{examples}`` are filled from the label set; a doc without them gets the
label set appended, and a project without one gets a built-in prompt.

The reply may be keep's lines (``1: act=commitment(0.9)``, values under 0.7
confidence dropped, ``NONE``) or one JSON object (``{"act": "commitment"}``).
Only values that exist as ``.tag/<key>/<value>`` notes are written, at most
one per tag, and never a tag the note already has (the writer's own choice
stands). A reply that is neither is malformed: nothing is written, and the
job says so. Tags are written through the notes domain, so the project's
tag rules apply as to any other write.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import BadRequest
from app.jobs import repository as jobs
from app.jobs.kinds import JobKind
from app.models import Note
from app.notes import service as notes
from app.notes.views import ItemView
from app.pipeline import prompt_docs
from app.pipeline.prompt_docs import Target, values
from app.providers.summarization.base import ChatModel, Summarizer
from app.settings import Limits
from app.tenancy import Scope
from app.tenants import service as tenants

#: keep's bar for a line's ``(confidence)``.
THRESHOLD = 0.7
#: What the model reads of a note: enough for its gist.
MAX_TEXT = 8_000
MAX_DESCRIPTION = 1_000
_LINE = re.compile(r"^(?:NUMBER:\s*)?\d+:\s*(.*)$")
_ASSIGN = re.compile(r"([A-Za-z_][\w-]*)=([^\s(]+)(?:\s*\(\s*([0-9.]+)\s*\))?")
_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```$", re.S)

BUILTIN = """You label notes in an agent's memory with the project's tags.

{taxonomy}

Choose, for each tag, the one value that fits the note, and leave out the
tags that do not apply. Reply with one JSON object and nothing else, mapping
each chosen tag to its value, for example {examples_json}; reply {{}} when no
tag applies. Use only these values: {valid_values}."""


@dataclass(frozen=True, slots=True)
class Label:
    value: str
    description: str


@dataclass(frozen=True, slots=True)
class TagSpec:
    """A constrained tag of the project and its allowed values."""

    key: str
    description: str
    labels: tuple[Label, ...]
    when: str = ""


def _description(doc: ItemView) -> str:
    text = prompt_docs.prompt_section(doc.summary) or doc.summary.strip()
    return " ".join(text.split())[:MAX_DESCRIPTION]


def _flag(tags: Mapping[str, Any], key: str) -> bool:
    return [v.lower() for v in values(tags, key)][:1] == ["true"]


def specs_from(docs: Sequence[ItemView]) -> list[TagSpec]:
    """The constrained tags among ``.tag/*`` docs that have value docs."""
    parents: dict[str, ItemView] = {}
    children: dict[str, list[ItemView]] = {}
    for doc in docs:
        parts = doc.id.split("/")
        if parts[0] != ".tag" or not all(parts[1:]):
            continue
        if len(parts) == 2:
            parents[parts[1]] = doc
        elif len(parts) == 3:
            children.setdefault(parts[1], []).append(doc)
    specs = []
    for key, parent in sorted(parents.items()):
        labels = tuple(
            Label(child.id.rsplit("/", 1)[1], _description(child))
            for child in sorted(children.get(key, []), key=lambda d: d.id)
        )
        if _flag(parent.tags, "_constrained") and labels:
            when = (values(parent.tags, "_when") or [""])[0]
            specs.append(TagSpec(key, _description(parent), labels, when))
    return specs


async def label_set(session: AsyncSession, scope: Scope) -> list[TagSpec]:
    """The project's constrained tags, read from its ``.tag/*`` notes."""
    limits = Limits()
    query = notes.ListInput(
        prefix=".tag/", include_hidden=True, order_by="id", limit=limits.max_list_limit
    )
    found = await notes.list_notes(session, scope, query=query, limits=limits)
    return specs_from(found.items)


# -- the prompt ---------------------------------------------------------------------


def taxonomy(specs: Sequence[TagSpec]) -> str:
    blocks = []
    for spec in specs:
        lines = [f"Tag `{spec.key}`: {spec.description}".rstrip(": "), "Values (at most one):"]
        lines += [f"- `{v.value}`: {v.description}".rstrip(": ") for v in spec.labels]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def valid_values(specs: Sequence[TagSpec]) -> str:
    return "; ".join(f"{s.key}: {', '.join(v.value for v in s.labels)}" for s in specs)


def system_prompt(template: str | None, specs: Sequence[TagSpec]) -> str:
    """The instructions with the label set filled in (``str.replace``, not
    ``format``: a project's text may hold other braces)."""
    first = specs[0]
    fills = {
        "{taxonomy}": taxonomy(specs),
        "{valid_values}": valid_values(specs),
        "{examples}": f"1: {first.key}={first.labels[0].value}(0.9)\n2: NONE",
        "{examples_json}": json.dumps({first.key: first.labels[0].value}),
    }
    text = template if template is not None else BUILTIN.replace("{{}}", "{}")
    if template is not None and "{taxonomy}" not in text and "{valid_values}" not in text:
        text += "\n\n{taxonomy}\n\nOnly these values exist: {valid_values}"
    for mark, filled in fills.items():
        text = text.replace(mark, filled)
    return text


def user_message(text: str) -> str:
    return "Classify this text fragment:\n\n1: " + text[:MAX_TEXT]


# -- the reply ----------------------------------------------------------------------


def _candidates(reply: str) -> list[tuple[str, str]] | None:
    """(key, value) pairs the model gave, in its order; None if unreadable."""
    text = reply.strip()
    if fenced := _FENCE.match(text):
        text = fenced.group(1).strip()
    if text.upper() in ("NONE", "1: NONE"):
        return []
    if text.startswith("{"):
        try:
            body = json.loads(text)
        except ValueError:
            return None
        if not isinstance(body, dict):
            return None
        pairs = []
        for key, raw in body.items():
            given = raw if isinstance(raw, list) else [raw]
            pairs += [(str(key), v) for v in given if isinstance(v, str)]
        return pairs
    lines = [m.group(1) for line in text.splitlines() if (m := _LINE.match(line.strip()))]
    if not lines:
        return None
    pairs = []
    for line in lines:
        for key, value, confidence in _ASSIGN.findall(line):
            try:
                sure = float(confidence) if confidence else 1.0
            except ValueError:
                continue
            if sure >= THRESHOLD:
                pairs.append((key, value))
    return pairs


@dataclass(frozen=True, slots=True)
class Answer:
    """What the model's reply allows: the tags to write, what it invented."""

    tags: dict[str, str] = field(default_factory=dict)
    rejected: list[str] = field(default_factory=list)
    malformed: bool = False
    tokens: tuple[int, int] = (0, 0)
    prompt: str | None = None


def read_reply(reply: str, specs: Sequence[TagSpec]) -> Answer:
    """The tags the reply names that the label set has, one per tag."""
    pairs = _candidates(reply)
    if pairs is None:
        return Answer(malformed=True)
    allowed = {s.key.casefold(): s for s in specs}
    tags: dict[str, str] = {}
    rejected = []
    for key, value in pairs:
        spec = allowed.get(key.casefold())
        names = {v.value.casefold(): v.value for v in spec.labels} if spec else {}
        label = names.get(value.casefold())
        if spec is None or label is None:
            rejected.append(f"{key}={value}")
        elif spec.key not in tags:
            tags[spec.key] = label
    return Answer(tags=tags, rejected=rejected)


# -- the job ------------------------------------------------------------------------


async def queue(
    session: AsyncSession, scope: Scope, *, model: Summarizer, written: Sequence[Note]
) -> None:
    """Queue classification of notes just written (their embedding done),
    when the project asked for it and a model can do it."""
    if not written or not isinstance(model, ChatModel):
        return
    if (await tenants.project_settings(session, scope)).get("auto_tag") is not True:
        return
    for note in written:
        await jobs.enqueue(
            session,
            scope,
            kind=JobKind.AUTO_TAG,
            note_id=note.id,
            payload={"content_hash": note.content_hash},
            priority=jobs.BACKGROUND_PRIORITY,
        )


@dataclass(frozen=True, slots=True)
class Ask:
    system: str
    user: str
    specs: tuple[TagSpec, ...]
    prompt: str | None


async def prepare(
    session: AsyncSession, scope: Scope, *, model: Summarizer, note: Note
) -> Ask | str:
    """What to ask the model about the note, or why nothing is asked."""
    if not isinstance(model, ChatModel):
        return "no model configured"
    if (await tenants.project_settings(session, scope)).get("auto_tag") is not True:
        return "auto_tag is off"
    target = Target(note.id, note.tags, note.summary)
    specs = [
        s
        for s in await label_set(session, scope)
        if not s.when or prompt_docs.when_holds(s.when, target)
    ]
    if not specs:
        return "no constrained tags apply"
    chosen = await prompt_docs.for_note(session, scope, "tag", target)
    system = system_prompt(chosen.text if chosen else None, specs)
    text = note.pending_content or note.summary
    return Ask(system, user_message(text), tuple(specs), chosen.doc_id if chosen else None)


async def classify(model: Summarizer, ask: Ask | str) -> Answer | str:
    """The model's reading of the note (outside any transaction)."""
    if isinstance(ask, str) or not isinstance(model, ChatModel):
        return ask if isinstance(ask, str) else "no model configured"
    reply = await model.generate(ask.system, ask.user, max_tokens=256)
    answer = read_reply(reply.text, ask.specs)
    tokens = reply.tokens(-(-(len(ask.system) + len(ask.user)) // 4))
    return Answer(answer.tags, answer.rejected, answer.malformed, tokens, ask.prompt)


async def write(
    session: AsyncSession, scope: Scope, *, note: Note, answer: Answer | str
) -> dict[str, Any]:
    """Write the chosen tags the note does not have yet; the job's result."""
    if isinstance(answer, str):
        return {"skipped": answer}
    result: dict[str, Any] = {
        "prompt": answer.prompt,
        "tokens_in": answer.tokens[0],
        "tokens_out": answer.tokens[1],
    }
    if answer.malformed:
        return result | {"malformed": True, "tags": {}}
    new = {k: v for k, v in answer.tags.items() if k not in note.tags}
    result |= {"tags": new, "rejected": answer.rejected}
    if new:
        try:
            await notes.tag(session, scope, raw_id=note.id, set_tags=new)
        except BadRequest as exc:  # the project's tag rules refused: write nothing
            return result | {"tags": {}, "refused": str(exc)}
    return result
