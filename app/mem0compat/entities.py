"""mem0's entities (``/v1/entities/``, ``/v2/entities/{type}/{name}/``):
the users, agents, apps and runs that hold memories, counted from the
memories themselves (keepmem keeps no entity table for them), and
forgetting one: its memories, and for a user, agent or run its threads
(the messages memories were formed from)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import EntityNotFound, NoteNotFound
from app.mem0compat.schemas import Mem0Entity, Mem0EntityList
from app.mem0compat.service import fields_of, refuse, scan
from app.memories import intake
from app.memories import service as memories
from app.memories.model import stamp
from app.notes import history
from app.tenancy import Scope

TYPES = {"user": "user_id", "agent": "agent_id", "app": "app_id", "run": "run_id"}
THREADS_PAGE = 200


@dataclass(slots=True)
class _Tally:
    count: int
    first: str
    last: str


async def entities(session: AsyncSession, scope: Scope) -> Mem0EntityList:
    """Every user, agent, app and run with current memories, and how many."""
    intake.whole_project(scope)
    tallies: dict[tuple[str, str], _Tally] = {}
    for m in await scan(session, scope, None, superseded=False):
        f = fields_of(m)
        created, updated = stamp(f.created_at), stamp(f.updated_at)
        for kind, field in TYPES.items():
            name = getattr(f, field)
            if name is None:
                continue
            t = tallies.setdefault((kind, name), _Tally(0, created, updated))
            t.count += 1
            t.first, t.last = min(t.first, created), max(t.last, updated)
    results = [
        Mem0Entity(
            id=f"{kind}:{name}",
            name=name,
            type=kind,
            total_memories=t.count,
            created_at=t.first,
            updated_at=t.last,
        )
        for (kind, name), t in sorted(tallies.items())
    ]
    return Mem0EntityList(count=len(results), results=results)


async def forget(session: AsyncSession, scope: Scope, *, kind: str, name: str) -> int:
    """Delete an entity's memories (current and superseded) and, for a
    user, agent or run, its threads; a 404 when there was nothing."""
    intake.whole_project(scope)
    field = TYPES.get(kind)
    if field is None:
        raise refuse(f"entity type {kind[:20]!r} is not one of user, agent, app, run")
    deleted = 0
    for m in await scan(session, scope, {field: name}, superseded=True):
        await history.delete(session, scope, raw_id=m.id)
        deleted += 1
    deleted += await _forget_threads(session, scope, kind=kind, name=name)
    if not deleted:
        raise EntityNotFound(f"no {kind} {name[:200]!r} holds memories in this project")
    return deleted


async def _forget_threads(session: AsyncSession, scope: Scope, *, kind: str, name: str) -> int:
    if kind == "run":
        try:
            gone = await memories.delete_thread(session, scope, name, memories=True)
        except NoteNotFound:
            return 0
        return gone.messages + gone.memories
    if kind == "app":
        return 0
    user, agent = (name, None) if kind == "user" else (None, name)
    deleted = 0
    while True:
        threads = await memories.threads(
            session, scope, user_id=user, agent_id=agent, limit=THREADS_PAGE, offset=0
        )
        for t in threads:
            gone = await memories.delete_thread(session, scope, t.id, memories=True)
            deleted += gone.messages + gone.memories
        if len(threads) < THREADS_PAGE:
            return deleted
