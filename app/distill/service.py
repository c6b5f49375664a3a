"""Distillation: a memory made from chosen passages, with its provenance.

The agent names its sources (citations, passages, character ranges) and
either writes the memory itself (``statement``: stored as it is, no model
is asked) or lets the memories' model render it (``memory_llm_*``: the same
model and the same daily token budget as memory formation) with one of the
project's ``.prompt/distill/*`` docs. Without a model and without a
statement nothing is guessed: the agent is told to write the statement.

The memory is written through the memories domain (``remember``, or
``restate`` for a memory the caller names), so it is reconciled like any
other: said again, it updates instead of adding a copy. It then gets a
``derived_from`` edge to every source (a passage ``ID@P{N}`` or a note),
kept apart from its tag edges, and the tags ``distilled=<prompt>`` and
``citations`` (the citation ids it stands on; not keep's ``cites``, an edge
tag whose values name notes).

A model call is made inside the request, with the provider's timeout. Its
tokens are counted in a transaction of their own as soon as the reply is
in, so a reply that cannot be used (502, nothing stored) is paid for all
the same and an edited prompt cannot spend past the budget.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession

from app import tenancy
from app.db import Database
from app.distill import sources
from app.distill.sources import Source, SourceInput
from app.errors import AppError, BadRequest, NoteNotFound, TooManyRequests
from app.kit.timeutil import utcnow
from app.memories import extraction
from app.memories import service as memories
from app.memories.intake import whole_project
from app.memories.model import PREFIX
from app.memories.schemas import RememberIn, RememberOut
from app.memories.settings import budget_of
from app.models import Note
from app.notes import distill_prompts, edges, tagging
from app.notes import repository as notes
from app.notes.views import split_system
from app.providers import distill_llm
from app.providers.embedding.base import Embedder, QueryCache
from app.settings import Limits, Settings
from app.tenancy import Scope
from app.usage import service as spend

PROMPTS = tuple(distill_prompts.PROMPTS)
DEFAULT_PROMPT = "memory"
MAX_SOURCES = 50
AGENT = "agent"
DISTILLED_TAG = "distilled"
CITATIONS_TAG = "citations"
# The tags a memory is made of (``Candidate.note_tags`` and its links).
MEMORY_TAGS = frozenset(
    {
        "memory", "subject", "attribute", "value", "cardinality", "certainty", "confidence",
        "negated", "references", "thread", "user", "agent", "superseded_by", "superseded_at",
    }
)  # fmt: skip
_PROMPT = re.compile(r"^##[ \t]+Prompt[ \t]*\n(.*?)(?=^##[ \t]|\Z)", re.M | re.S)
NO_MODEL = (
    "this server has no memory model (memory_llm_provider is none): write the memory "
    "yourself in `statement` (read the sources with GET /v1/citations/{id}) and send "
    "it with the same sources; it is stored with their provenance"
)


class ModelReplyUnusable(AppError):
    """The memories' model answered something that is not the JSON asked for."""

    status_code = 502
    code = "model_reply_unusable"


class BudgetSpent(TooManyRequests):
    code = "budget_spent"


@dataclass(frozen=True, slots=True)
class DistillInput:
    sources: Sequence[SourceInput]
    prompt: str = DEFAULT_PROMPT
    statement: str | None = None
    kind: str | None = None
    subject: str | None = None
    user_id: str | None = None
    agent_id: str | None = None
    tags: dict[str, Any] | None = None
    memory_id: str | None = None  # an existing memory to restate


@dataclass(frozen=True, slots=True)
class Distilled:
    op: str
    memory: RememberOut
    tags: dict[str, Any]
    sources: list[Source]
    rendered_by: str
    prompt: str


@dataclass(frozen=True, slots=True)
class Models:
    """What a distillation may need from the process: the query embedder
    (reconciliation finds restatements by meaning), the server's settings
    (the memories' model and budget) and the database (to count a model
    call's tokens in a transaction of its own)."""

    embedder: Embedder
    cache: QueryCache
    settings: Settings
    db: Database


@dataclass(frozen=True, slots=True)
class _Rendered:
    statement: str
    kind: str | None
    by: str


async def distill(
    session: AsyncSession, scope: Scope, *, data: DistillInput, limits: Limits, models: Models
) -> Distilled:
    """Make one memory from ``data.sources`` (see the module's docstring)."""
    whole_project(scope)
    _check(data, models.settings)
    current = None
    if data.memory_id is not None:
        current = (await _memory(session, scope, data.memory_id)).summary
    found = await sources.resolve(session, scope, data.sources)
    if data.statement is not None:
        made = _Rendered(" ".join(data.statement.split()), None, AGENT)
    else:
        made = await _render(session, scope, data, found, models, current=current)
    cited = [s.citation.id for s in found if s.citation is not None]
    own = {DISTILLED_TAG: data.prompt} | ({CITATIONS_TAG: cited} if cited else {})
    tags = {**(data.tags or {}), **own}
    if data.memory_id is not None:
        written = await memories.restate(
            session, scope, memory_id=data.memory_id, statement=made.statement, limits=limits
        )
    else:
        body = _remember_in(data, made, tags)
        written = await memories.remember(
            session, scope, body=body, limits=limits, embedder=models.embedder, cache=models.cache
        )
    memory_id = written.memory.id
    await edges.add_provenance(session, scope, note_id=memory_id, targets=[s.target for s in found])
    if written.op not in ("add", "supersede"):
        # An existing memory was said again: it gains these tags (never the
        # ones that make it a memory: its slot and timeline are its own).
        more = {k: v for k, v in tags.items() if k not in MEMORY_TAGS}
        await tagging.tag(session, scope, raw_id=memory_id, set_tags=more)
    note = await notes.get(session, scope, memory_id)
    user_tags = split_system(note.tags)[0] if note is not None else {}
    return Distilled(written.op, written, user_tags, found, made.by, data.prompt)


def _remember_in(data: DistillInput, made: _Rendered, tags: dict[str, Any]) -> RememberIn:
    try:
        return RememberIn.model_validate(
            {
                "statement": made.statement,
                "subject": data.subject,
                "kind": data.kind or made.kind or "fact",
                "user_id": data.user_id,
                "agent_id": data.agent_id,
                "tags": tags,
            }
        )
    except ValidationError as exc:
        raise BadRequest(f"the memory cannot be written: {exc.errors()[0]['msg']}") from exc


def _check(data: DistillInput, settings: Settings) -> None:
    """The input's rules a schema cannot state, checked before anything is read."""
    if data.prompt not in PROMPTS:
        raise BadRequest(f"unknown prompt {data.prompt!r}: use one of {', '.join(PROMPTS)}")
    if not 1 <= len(data.sources) <= MAX_SOURCES:
        raise BadRequest(f"give 1 to {MAX_SOURCES} sources, not {len(data.sources)}")
    if data.memory_id is not None and any(
        v is not None for v in (data.subject, data.user_id, data.agent_id, data.kind)
    ):
        raise BadRequest(
            "id restates an existing memory as it is (its subject, owner and kind stay): "
            "leave out subject, user_id, agent_id and kind"
        )
    if data.statement is not None and not data.statement.split():
        raise BadRequest("statement is blank: write the memory, or leave statement out")
    if data.statement is None and settings.memory_llm_provider == "none":
        raise BadRequest(NO_MODEL)


async def _memory(session: AsyncSession, scope: Scope, memory_id: str) -> Note:
    note = await notes.get(session, scope, memory_id) if memory_id.startswith(PREFIX) else None
    if note is None:
        raise NoteNotFound(f"memory not found: {memory_id}")
    return note


# -- a model renders ---------------------------------------------------------------------


async def prompt_text(session: AsyncSession, scope: Scope, name: str) -> str:
    """The ``## Prompt`` section of the project's ``.prompt/distill/<name>``
    doc; keepmem's own text when the project deleted the doc or left it
    without one."""
    note = await notes.get(session, scope, distill_prompts.PREFIX + name)
    found = _PROMPT.search(note.summary) if note is not None else None
    return (found.group(1).strip() if found else "") or distill_prompts.PROMPTS[name][2]


def _where(s: Source) -> str:
    place = s.note if s.part is None else f"{s.note}, passage {s.part}"
    located = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in sorted(s.locator.items()))
    return f"{place} ({located})" if located else place


def render_input(found: Sequence[Source], *, subject: str | None, current: str | None) -> str:
    """What the model reads: the numbered passages, each on one line (a
    passage's own line breaks could otherwise forge a numbered line)."""
    lines: list[str] = []
    if subject:
        lines.append(f"Subject of the memory: {' '.join(subject.split())}")
    if current:
        lines.append(f"Memory to restate: {' '.join(current.split())}")
    lines.append("Passages:")
    for n, s in enumerate(found, 1):
        kept = "" if s.citation is not None else " (its summary: the text is not kept)"
        lines.append(f"[{n}] {_where(s)}{kept}: {' '.join(s.text.split())}")
    return "\n".join(lines)


def _model(settings: Settings) -> distill_llm.Distiller:
    key = settings.memory_llm_api_key.get_secret_value() if settings.memory_llm_api_key else ""
    made = distill_llm.create(
        settings.memory_llm_provider,
        model=settings.memory_llm_model,
        api_key=key,
        base_url=settings.memory_llm_base_url,
    )
    if made is None:
        raise BadRequest(NO_MODEL)
    return made


async def _budget_left(session: AsyncSession, scope: Scope, settings: Settings) -> int:
    budget = await budget_of(session, scope, settings.memory_llm_tokens_per_day)
    spent = await spend.spend_on(session, scope, utcnow().date(), use="memories")
    return budget - ((spent.tokens_in + spent.tokens_out) if spent else 0)


def _until_midnight() -> str:
    now = utcnow()
    midnight = (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    return str(max(1, int((midnight - now).total_seconds())))


async def _count(db: Database, scope: Scope, done: distill_llm.Rendered) -> None:
    """The call's tokens, committed now whatever becomes of the request."""
    async with tenancy.transaction(db, scope) as session:
        await extraction.count_call(session, scope, done.tokens_in, done.tokens_out)


async def _render(
    session: AsyncSession,
    scope: Scope,
    data: DistillInput,
    found: Sequence[Source],
    models: Models,
    *,
    current: str | None,
) -> _Rendered:
    model = _model(models.settings)
    try:
        system = distill_llm.system_prompt(await prompt_text(session, scope, data.prompt))
        user = render_input(found, subject=data.subject or data.user_id, current=current)
        if len(system) + len(user) > model.max_input_chars:
            raise BadRequest(
                f"the prompt and the sources hold {len(system) + len(user)} characters; the "
                f"model is sent at most {model.max_input_chars}: distil from fewer or shorter "
                "passages, or write the statement yourself"
            )
        cost, left = (
            model.estimate(system, user),
            await _budget_left(session, scope, models.settings),
        )
        if cost > left:
            raise BudgetSpent(
                f"the project's memory model budget for today is spent ({max(left, 0)} tokens "
                f"left, this call may take {cost}): write the statement yourself, or wait "
                "for the next UTC day (PATCH /v1/memories/settings sets the budget)",
                headers={"Retry-After": _until_midnight()},
            )
        done = await model.render(system, user)
        await _count(models.db, scope, done)
        try:
            reply = distill_llm.parse_reply(done.text)
        except distill_llm.UnusableReply as exc:
            raise ModelReplyUnusable(f"{model.name}: {exc}; nothing was stored") from exc
        return _Rendered(reply.statement, reply.kind, model.name)
    finally:
        await model.aclose()
