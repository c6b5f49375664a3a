"""Reconciliation: a candidate memory against what is already believed.

Only memories of the candidate's slot can conflict with it (same subject and
attribute; and same value where the attribute holds many), so nothing else
is ever read, judged or changed. A slot is a timeline: its memories ordered
by valid time, each superseded by the next, the last one current. So the
current value is decided by time, deterministically (newest valid time,
else newest observation), whatever order the statements arrive in, and
nothing is ever deleted: a change of belief adds a memory and marks the
old one ``superseded_by`` it.

Outcomes: ``add`` (a new slot, or a new value of a many-valued one),
``supersede`` (a new belief where another stood: moved city, new job,
a retraction), ``update`` (the same belief said with more: a new version
of the same note, so keep's history is the belief's history), ``noop``
(said again: the message joins its sources, nothing else changes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession

from app.kit.changes import EventKind
from app.memories import repository as repo
from app.memories.model import Candidate, Memory, refines, same_value, stamp
from app.notes import derived, reading, tagging
from app.notes import writing as notes
from app.notes.writing import PutInput
from app.settings import Limits
from app.tenancy import Scope

OPS = ("add", "supersede", "update", "noop")


@dataclass(slots=True)
class Plan:
    op: str
    memory_id: str  # the memory written, or the one said again
    # (memory id, superseded by, at): the slot's links that change; None clears
    links: list[tuple[str, str | None, datetime | None]] = field(default_factory=list)
    inserted_link: tuple[str, datetime] | None = None  # the new memory's own, when not current
    reason: str = ""
    cite: bool = True  # a noop: the candidate's messages join the memory's sources


def _same_words(a: str, b: str) -> bool:
    """The same value, or one with more words after it ("Brno" and "Brno,
    Czechia")."""
    return same_value(a, b) or refines(a, b) or refines(b, a)


def _same(m: Memory, c: Candidate) -> bool:
    return m.negated == c.negated and _same_words(m.value, c.value)


def ordered(slot: Sequence[Memory]) -> list[Memory]:
    """A slot's memories in time order. Times are kept to the second, so
    memories of one second are put in the order their links already say
    (what a memory was superseded by comes after it), the current one last."""
    by_time = sorted(slot, key=lambda m: (m.at, m.current, m.id))
    out: list[Memory] = []
    i = 0
    while i < len(by_time):
        j = i
        while j < len(by_time) and by_time[j].at == by_time[i].at:
            j += 1
        group = by_time[i:j]
        if len(group) > 1:
            ids = {m.id: m for m in group}
            pointed = {m.superseded_by for m in group if m.superseded_by in ids}
            chained: list[Memory] = []
            for start in (m for m in group if m.id not in pointed):
                cur: Memory | None = start
                while cur is not None and cur not in chained:
                    chained.append(cur)
                    cur = ids.get(cur.superseded_by or "")
            group = chained + [m for m in group if m not in chained]
        out += group
        i = j
    return out


def plan(c: Candidate, slot: Sequence[Memory], replaced: Memory | None = None) -> Plan:
    """What ``c`` does to its slot (``slot``: every memory of it, current or
    not). ``replaced``: a memory a judge said ``c`` replaces (already
    checked to share its subject and attribute)."""
    for m in slot:
        if m.id == c.id:
            return Plan("noop", m.id, reason="already recorded")
    timeline = ordered(slot)
    before = [m for m in timeline if m.at <= c.at]
    after = [m for m in timeline if m.at > c.at]
    prev = before[-1] if before else None
    nxt = after[0] if after else None
    if prev is not None and _same(prev, c):
        upgrade = refines(prev.value, c.value) or (
            c.certainty == "fact" and prev.certainty == "candidate"
        )
        return Plan("update" if upgrade else "noop", prev.id)
    if nxt is not None and _same(nxt, c):
        # Said before the memory that holds it was recorded: not a belief of
        # its own between the two (no copy of the next one in the timeline).
        return Plan("noop", nxt.id, reason="said before it was recorded")
    if c.negated and c.single and prev is not None and not _same_words(prev.value, c.value):
        # "no longer in Berlin" while the belief is Munich: nothing to retract,
        # and the message is no source of the belief it does not speak of.
        return Plan("noop", prev.id, reason="retracts a value that is not the belief", cite=False)
    chain: list[Memory | Candidate] = [*before, c, *after]
    links: list[tuple[str, str | None, datetime | None]] = []
    inserted: tuple[str, datetime] | None = None
    for i, item in enumerate(chain):
        succ = chain[i + 1] if i + 1 < len(chain) else None
        want = (succ.id, succ.at) if succ is not None else None
        if item is c:
            inserted = want
            continue
        assert isinstance(item, Memory)
        have = (item.superseded_by, item.superseded_at)
        if want is None:
            if have != (None, None):
                links.append((item.id, None, None))
        elif have != (want[0], stamp(want[1])):
            links.append((item.id, want[0], want[1]))
    if (
        replaced is not None
        and replaced.current
        and replaced.at <= c.at
        and replaced.id not in {m.id for m in slot}
    ):
        links.append((replaced.id, c.id, c.at))
    op = "supersede" if (prev is not None or any(to == c.id for _, to, _ in links)) else "add"
    return Plan(op, c.id, links=links, inserted_link=inserted)


async def slot_memories(session: AsyncSession, scope: Scope, c: Candidate) -> list[Memory]:
    """Every memory (current or superseded) of the candidate's slot."""
    views = await reading.list_notes(
        session,
        scope,
        query=reading.ListInput(
            tags={"subject": c.subject, "attribute": c.attribute},
            tag_keys=["memory"],
            limit=1000,
            order_by="created",
        ),
        limits=Limits(),
    )
    out = []
    for view in views.items:
        m = Memory.of(view)
        if m is not None and m.slot == c.slot:
            out.append(m)
    return out


async def _link(
    session: AsyncSession, scope: Scope, memory_id: str, to: str | None, at: datetime | None
) -> None:
    drop = ["superseded_by", "superseded_at"]
    if to is None or at is None:
        await tagging.tag(session, scope, raw_id=memory_id, remove=drop)
        return
    await tagging.tag(
        session,
        scope,
        raw_id=memory_id,
        remove=drop,
        set_tags={"superseded_by": to, "superseded_at": stamp(at)},
    )
    await derived.announce(session, scope, note_id=memory_id, kind=EventKind.MEMORY_SUPERSEDED)


async def apply(
    session: AsyncSession,
    scope: Scope,
    c: Candidate,
    *,
    limits: Limits,
    replaced: Memory | None = None,
) -> Plan:
    """Reconcile ``c`` with its slot and write the outcome through the notes
    domain. Slots are locked for the transaction: two extractions of one
    project never interleave on the same slot."""
    # Memories keep their time to the second (keep's timestamps): so does c,
    # or a memory of this second would seem older than one read back.
    c.at = c.at.replace(microsecond=0)
    await repo.lock_slot(session, scope, "|".join(c.slot))
    slot = await slot_memories(session, scope, c)
    p = plan(c, slot, replaced)
    if p.op == "noop":
        if c.sources and p.cite:
            await tagging.tag(
                session, scope, raw_id=p.memory_id, set_tags={"references": c.sources}
            )
        return p
    if p.op == "update":
        await restate(session, scope, p.memory_id, c, limits=limits)
        return p
    tags = c.note_tags()
    if p.inserted_link is not None:
        tags |= {"superseded_by": p.inserted_link[0], "superseded_at": stamp(p.inserted_link[1])}
    await notes.put(
        session,
        scope,
        data=PutInput(
            id=c.id, content=c.statement, summary=c.statement, tags=tags, created_at=stamp(c.at)
        ),
        limits=limits,
    )
    await derived.announce(session, scope, note_id=c.id, kind=EventKind.MEMORY_ADDED)
    for memory_id, to, at in p.links:
        await _link(session, scope, memory_id, to, at)
    return p


async def restate(
    session: AsyncSession, scope: Scope, memory_id: str, c: Candidate, *, limits: Limits
) -> Plan:
    """``c`` says memory ``memory_id`` again, with more or other words: a new
    version of that note (its history keeps the old wording), its value and
    certainty as ``c`` has them, ``c``'s sources added to its own."""
    await notes.put(session, scope, data=PutInput(id=memory_id, content=c.statement), limits=limits)
    fresh = c.note_tags()
    await tagging.tag(
        session,
        scope,
        raw_id=memory_id,
        remove=["value", "certainty", "confidence"],
        set_tags={k: fresh[k] for k in ("value", "certainty", "confidence")}
        | ({"references": c.sources} if c.sources else {}),
    )
    await derived.announce(session, scope, note_id=memory_id, kind=EventKind.MEMORY_UPDATED)
    return Plan("update", memory_id)


__all__ = ["OPS", "Plan", "apply", "plan", "restate", "slot_memories"]
