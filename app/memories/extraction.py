"""The worker's extraction of a thread's new messages.

``load`` reads the inbox (and, for a model, the current memories of the
subjects it may speak about: the only ones a model may say a new memory
replaces), ``read`` runs the model when one is configured and the
project's budget for the day allows the call (else the rules), and
``apply`` reconciles every memory and empties the inbox in one transaction:
a crash in between loses nothing; a malformed reply raises before anything
is written (the job retries, then dead-letters with the inbox intact).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.jobs import repository as jobs
from app.jobs.kinds import JobKind
from app.kit.timeutil import parse_timestamp, utcnow
from app.memories import reconcile, rules
from app.memories import repository as repo
from app.memories.intake import EXTRACT_PRIORITY, thread_note_id
from app.memories.model import (
    KINDS,
    SINGLE,
    Candidate,
    Memory,
    canonical_attribute,
    one_line,
    subject_key,
)
from app.memories.settings import budget_of
from app.notes import reading
from app.providers.extraction import Extraction, Extractor, Known, Proposed, Said
from app.settings import Limits
from app.tenancy import Scope
from app.usage import service as spend

log = logging.getLogger("keepmem.memories")

BATCH = 200  # inbox messages per run; the rest are the next run's
KNOWN = 60  # current memories a model is shown


@dataclass(slots=True)
class Loaded:
    thread_id: str
    messages: list[dict[str, Any]]
    known: list[Memory]
    budget_left: int
    more: bool

    @property
    def last_seq(self) -> int:
        return int(self.messages[-1]["seq"]) if self.messages else -1

    def said(self) -> list[Said]:
        return [
            Said(
                i + 1,
                # A system prompt's profile fields are about the thread's user.
                str(m.get("user") or "user") if m["role"] == "system" else str(m["speaker"]),
                str(m["role"]),
                str(m["text"]),
                str(m["at"]),
                named=bool(m.get("named")),
            )
            for i, m in enumerate(self.messages)
        ]


@dataclass(slots=True)
class Read:
    proposed: list[Proposed] = field(default_factory=list)
    mode: str = "rules"
    tokens_in: int = 0
    tokens_out: int = 0
    refused: bool = False  # the budget was spent: the rules read it
    dropped: int = 0


async def _current_of(session: AsyncSession, scope: Scope, subjects: Sequence[str]) -> list[Memory]:
    out: list[Memory] = []
    for subject in subjects:
        found = await reading.list_notes(
            session,
            scope,
            query=reading.ListInput(tags={"subject": subject}, tag_keys=["memory"], limit=KNOWN),
            limits=Limits(),
        )
        out += [m for v in found.items if (m := Memory.of(v)) is not None and m.current]
    return out[:KNOWN]


async def load(
    session: AsyncSession, scope: Scope, *, thread_id: str, server_budget: int, model: bool
) -> Loaded | None:
    if await repo.thread(session, scope, thread_id) is None:
        return None
    messages = await repo.inbox(session, scope, thread_id=thread_id, limit=BATCH + 1)
    known: list[Memory] = []
    if model and messages:
        subjects = list(dict.fromkeys(str(m["speaker"]) for m in messages[:BATCH]))
        known = await _current_of(session, scope, subjects)
    budget = await budget_of(session, scope, server_budget)
    spent = await spend.spend_on(session, scope, utcnow().date(), use="memories")
    used = (spent.tokens_in + spent.tokens_out) if spent else 0
    return Loaded(
        thread_id=thread_id,
        messages=messages[:BATCH],
        known=known,
        budget_left=budget - used,
        more=len(messages) > BATCH,
    )


def _known(loaded: Loaded) -> list[Known]:
    return [
        Known(i + 1, m.subject, m.attribute, m.value, m.statement)
        for i, m in enumerate(loaded.known)
    ]


async def read(loaded: Loaded, extractor: Extractor | None) -> Read:
    """The memories of the loaded messages: a model's when one is set and the
    day's budget allows, else the rules'. A model's transient failure or
    malformed reply propagates (the job retries; the inbox waits)."""
    said = loaded.said()
    if not said:
        return Read()
    if extractor is not None:
        known = _known(loaded)
        if extractor.estimate(said, known) <= loaded.budget_left:
            got: Extraction = await extractor.extract(said, known)
            return Read(
                got.memories, extractor.name, got.tokens_in, got.tokens_out, dropped=got.dropped
            )
        return Read(rules.extract(said), "rules", refused=True)
    return Read(rules.extract(said))


def _time(raw: str | None, fallback: datetime) -> datetime:
    if raw:
        try:
            return parse_timestamp(raw)
        except ValueError:
            pass
    return fallback


def candidate(p: Proposed, loaded: Loaded) -> Candidate | None:
    """A proposed memory with its message numbers turned into note ids (a
    number outside the batch was dropped when the reply was read)."""
    sources = [loaded.messages[n - 1] for n in p.sources if 1 <= n <= len(loaded.messages)]
    if not sources or p.kind not in KINDS:
        return None
    subject, attribute = one_line(p.subject, 200), canonical_attribute(p.attribute)
    value, statement = one_line(p.value, 500), one_line(p.statement, 1000)
    if not (subject and attribute and value and statement):
        return None
    said_at = max(parse_timestamp(str(m["at"])) for m in sources)
    first = sources[0]
    return Candidate(
        kind=p.kind,
        subject=subject,
        attribute=attribute,
        value=value,
        statement=statement,
        confidence=max(0.0, min(1.0, p.confidence)),
        single=p.single or attribute in SINGLE,
        at=_time(p.valid_at, said_at),
        certainty=p.certainty,
        negated=p.negated,
        sources=[str(m["id"]) for m in sources],
        thread=loaded.thread_id,
        user=str(first.get("user") or ""),
        agent=str(first.get("agent") or ""),
    )


def _replaced(p: Proposed, c: Candidate, loaded: Loaded) -> Memory | None:
    """The memory a model said this one replaces, if it may: shown to it, and
    of the same subject and attribute (else the model's word is ignored)."""
    if p.replaces is None or not 1 <= p.replaces <= len(loaded.known):
        return None
    m = loaded.known[p.replaces - 1]
    if subject_key(m.subject) != subject_key(c.subject) or m.attribute != c.attribute:
        return None
    return m


async def count_call(session: AsyncSession, scope: Scope, tokens_in: int, tokens_out: int) -> None:
    """A model call whose reply could not be used: its tokens count all the same."""
    await spend.add_spend(
        session,
        scope,
        use="memories",
        day=utcnow().date(),
        calls=1,
        tokens_in=tokens_in,
        tokens_out=tokens_out,
    )


async def apply(
    session: AsyncSession, scope: Scope, loaded: Loaded, got: Read, *, limits: Limits
) -> dict[str, Any]:
    """Reconcile every memory read, empty the inbox of what was read, count
    the spend; all in the caller's transaction."""
    ops = dict.fromkeys(reconcile.OPS, 0)
    for p in got.proposed:
        c = candidate(p, loaded)
        if c is None:
            continue
        if p.replaces is not None and loaded.known:
            m = _replaced(p, c, loaded)
            if m is not None and m.single != c.single:
                c.single = m.single
            done = await reconcile.apply(session, scope, c, limits=limits, replaced=m)
        else:
            done = await reconcile.apply(session, scope, c, limits=limits)
        ops[done.op] += 1
    made = ops["add"] + ops["supersede"]
    await repo.done_with(
        session, scope, thread_id=loaded.thread_id, upto_seq=loaded.last_seq, made=made
    )
    if got.mode != "rules" or got.refused:
        await spend.add_spend(
            session,
            scope,
            use="memories",
            day=utcnow().date(),
            calls=0 if got.refused else 1,
            tokens_in=got.tokens_in,
            tokens_out=got.tokens_out,
            refused=1 if got.refused else 0,
        )
    if loaded.more or await repo.inbox_size(session, scope, thread_id=loaded.thread_id):
        await jobs.enqueue(
            session,
            scope,
            kind=JobKind.MEMORY_EXTRACT,
            note_id=thread_note_id(loaded.thread_id),
            payload={"thread_id": loaded.thread_id},
            priority=EXTRACT_PRIORITY,
            supersede=False,
        )
    return {
        "mode": got.mode,
        "messages": len(loaded.messages),
        "read": len(got.proposed),
        "dropped": got.dropped,
        "budget_spent": got.refused,
        **ops,
    }
