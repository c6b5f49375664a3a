"""The sessions domain: coding-agent sessions captured by hooks.

``intake`` takes events (``app.sessions.intake``); the worker digests them
(``app.sessions.digest``); this module reads them back (sessions, timeline,
checkpoints, patterns, the resume block), turns capture and injection off
and on, asks for checkpoints, and keeps the project's resume block fresh.
Services take ``(session, scope, *, ...)`` and never commit.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import NotFound
from app.jobs import repository as jobs
from app.jobs.kinds import JobKind
from app.kit.timeutil import parse_timestamp, utcnow
from app.notes import reading
from app.providers.embedding.base import Embedder, QueryCache
from app.search import service as search
from app.sessions import intake, resume
from app.sessions import repository as repo
from app.sessions.intake import DIGEST_PRIORITY, session_note_id, whole_project
from app.sessions.schemas import (
    PatternOut,
    ResumeOut,
    SessionOut,
    SpendOut,
    TimelineItem,
)
from app.sessions.settings import settings_of
from app.settings import Limits
from app.tenancy import Scope
from app.tenants import service as tenants
from app.usage import service as spend

# Notes the sessions domain writes itself: not "memories" to recall into a block.
OWN_PREFIXES = ("session/", "pattern/", "task/")


class SessionNotFound(NotFound):
    code = "session_not_found"


def view(row: SimpleNamespace) -> SessionOut:
    counts = {str(k): int(v) for k, v in (row.counts or {}).items()}
    return SessionOut(
        session_id=row.id,
        platform=row.platform,
        cwd=row.cwd,
        started_at=row.started_at,
        last_event_at=row.last_event_at,
        ended_at=row.ended_at,
        end_reason=row.end_reason,
        counts=counts,
        summary=row.summary,
        capture=row.capture,
        inject=row.inject,
        events=row.next_seq,
        checkpoints=row.checkpoints,
    )


async def get_session(session: AsyncSession, scope: Scope, *, session_id: str) -> SessionOut:
    whole_project(scope)
    row = await repo.get(session, scope, session_id)
    if row is None:
        raise SessionNotFound(f"session not found: {session_id}")
    return view(row)


async def list_sessions(
    session: AsyncSession, scope: Scope, *, limit: int, cwd: str | None
) -> list[SessionOut]:
    whole_project(scope)
    return [view(r) for r in await repo.recent(session, scope, limit=limit, cwd=cwd)]


async def patch_session(
    session: AsyncSession,
    scope: Scope,
    *,
    session_id: str,
    capture: bool | None,
    inject: bool | None,
) -> SessionOut:
    """Turn a session's capture or injection off (or back on)."""
    await get_session(session, scope, session_id=session_id)
    values = {k: v for k, v in (("capture", capture), ("inject", inject)) if v is not None}
    if values:
        await repo.update(session, scope, session_id, **values)
    return await get_session(session, scope, session_id=session_id)


async def timeline(
    session: AsyncSession,
    scope: Scope,
    *,
    session_id: str,
    kind: str | None,
    limit: int,
    cursor: str | None,
    limits: Limits,
) -> tuple[list[TimelineItem], str | None]:
    """A session's notes (events, observations, checkpoints), oldest first."""
    await get_session(session, scope, session_id=session_id)
    tags: dict[str, Any] = {"session": session_id}
    if kind:
        tags["kind" if kind in ("observation", "checkpoint") else "event"] = kind
    page = await reading.list_notes(
        session,
        scope,
        query=reading.ListInput(
            prefix=session_note_id(session_id) + "/",
            tags=tags,
            order_by="id",
            limit=limit,
            cursor=cursor,
        ),
        limits=limits,
    )
    items = [
        TimelineItem(
            id=v.id,
            kind=str(v.tags.get("event") or v.tags.get("kind") or ""),
            at=parse_timestamp(v.created_at),
            summary=v.summary,
            tags={k: x for k, x in v.tags.items() if not k.startswith("_")},
        )
        for v in page.items
    ]
    return items, page.next_cursor


async def request_checkpoint(
    session: AsyncSession, scope: Scope, *, session_id: str, note: str | None
) -> SessionOut:
    """Checkpoint a session now (the worker writes it)."""
    current = await get_session(session, scope, session_id=session_id)
    await intake.record_request(session, scope, current=current, note=note)
    return current


async def patterns(
    session: AsyncSession, scope: Scope, *, kinds: list[str] | None, limit: int
) -> list[PatternOut]:
    whole_project(scope)
    rows = await repo.patterns(session, scope, kinds=kinds, limit=limit)
    return [
        PatternOut(
            kind=r.kind,
            template=r.template,
            example=r.example,
            count=r.count,
            sessions=len(r.sessions),
            session_ids=list(r.sessions),
            files=list(r.files),
            first_seen=r.first_seen,
            last_seen=r.last_seen,
        )
        for r in rows
    ]


async def resume_context(
    session: AsyncSession, scope: Scope, *, cwd: str, session_id: str | None
) -> ResumeOut:
    """The precomputed block for ``cwd`` (else the project's): what a hook
    injects. Empty when injection is off for the project or the session."""
    whole_project(scope)
    conf = await settings_of(session, scope)
    state = await repo.resume_state(session, scope, cwd=cwd, session_id=session_id)
    inject = conf.inject and (state is None or state.inject is not False)
    text = (state.context if state is not None else None) or ""
    if not inject:
        text = ""
    text = text[: conf.resume_chars]
    return ResumeOut(context=text, chars=len(text), inject=inject)


async def refresh_resume(
    session: AsyncSession,
    scope: Scope,
    *,
    cwd: str,
    embedder: Embedder,
    cache: QueryCache,
) -> str:
    """Rebuild the resume block of ``cwd`` and of the whole project."""
    conf = await settings_of(session, scope)
    slug = scope.project_slug or await tenants.slug_of(session, scope, project_id=scope.project_id)
    tasks = await _open_tasks(session, scope)
    pats = await repo.patterns(session, scope, kinds=list(resume.SHOWN_KINDS), limit=30)
    out = ""
    for where in dict.fromkeys([cwd, ""]):
        recent = await repo.recent(session, scope, limit=20, cwd=where or None)
        cp = next((r.last_checkpoint for r in recent if r.last_checkpoint), None)
        memories = await _memories(session, scope, cp, [t for t, _ in tasks], embedder, cache)
        text = resume.block(
            project=slug,
            cwd=where,
            checkpoint=cp,
            tasks=tasks,
            patterns=pats,
            memories=memories,
            budget=conf.resume_chars,
        )
        await repo.put_resume(session, scope, cwd=where, context=text)
        out = out or text
    return out


async def _open_tasks(session: AsyncSession, scope: Scope) -> list[tuple[str, datetime]]:
    """keep's open commitments, newest first (the hooks' tasks and the agent's own)."""
    page = await reading.list_notes(
        session,
        scope,
        query=reading.ListInput(tags={"act": "commitment", "status": "open"}, limit=30),
        limits=Limits(),
    )
    return [(v.summary, parse_timestamp(v.updated_at)) for v in page.items]


async def _memories(
    session: AsyncSession,
    scope: Scope,
    cp: dict[str, Any] | None,
    tasks: list[str],
    embedder: Embedder,
    cache: QueryCache,
) -> list[tuple[str, str, float]]:
    """The project's own notes closest to where the last session stopped."""
    question = " ".join([str((cp or {}).get("summary") or "")[:600], *tasks[:5]]).strip()
    if not question:
        return []
    found = await search.find(
        session,
        scope,
        embedder=embedder,
        cache=cache,
        data=search.FindInput(query=question[:1000], limit=20),
    )
    return [
        (v.id, v.summary, score)
        for v, score in found.items
        if not v.id.startswith(OWN_PREFIXES) and score > 0.1
    ][:5]


async def spend_today(session: AsyncSession, scope: Scope, *, server_budget: int) -> SpendOut:
    from app.sessions.compress import budget_for

    conf = await settings_of(session, scope)
    today = utcnow().date()
    row = await spend.spend_on(session, scope, today, use="sessions")
    return SpendOut(
        day=today.isoformat(),
        calls=row.calls if row else 0,
        tokens_in=row.tokens_in if row else 0,
        tokens_out=row.tokens_out if row else 0,
        refused=row.refused if row else 0,
        budget=budget_for(conf.llm_tokens_per_day, server_budget),
    )


async def idle_sessions(
    session: AsyncSession, *, idle_minutes: int, limit: int
) -> list[tuple[uuid.UUID, uuid.UUID, str]]:
    """(tenant, project, session id) of sessions quiet for ``idle_minutes``
    with events since their last checkpoint (system transaction: every tenant)."""
    before = utcnow() - timedelta(minutes=idle_minutes)
    rows = await repo.idle(session, before=before, limit=limit)
    return [(r.tenant_id, r.project_id, r.id) for r in rows]


async def checkpoint_idle(session: AsyncSession, scope: Scope, *, session_id: str) -> None:
    """Queue the checkpoint of a session gone quiet."""
    await jobs.enqueue(
        session,
        scope,
        kind=JobKind.SESSION_DIGEST,
        note_id=session_note_id(session_id),
        payload={"session_id": session_id, "trigger": "idle"},
        priority=DIGEST_PRIORITY,
    )
