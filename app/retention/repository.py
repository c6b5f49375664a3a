"""All SQL of retention: a project's retention (``projects.retention_days``,
the one column of projects retention writes) and which notes are due (by
their ``expires_at``, which the notes domain writes).

System documents (ids starting with '.') never expire."""

from __future__ import annotations

import uuid

from sqlalchemy import ColumnElement, and_, or_, select, text, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.models import Job, Note, Project
from app.tenancy import Scope

OPEN = ("pending", "dispatched", "running")


async def set_retention(session: AsyncSession, scope: Scope, days: int | None) -> None:
    await session.execute(
        update(Project)
        .where(Project.tenant_id == scope.tenant_id, Project.id == scope.project_id)
        .values(retention_days=days)
    )


async def retention(session: AsyncSession, scope: Scope) -> int | None:
    return await session.scalar(
        select(Project.retention_days).where(
            Project.tenant_id == scope.tenant_id, Project.id == scope.project_id
        )
    )


def _due(days: int | None) -> ColumnElement[bool]:
    """A note is due when its expiry passed, or it was not updated within
    the project's retention."""
    expired = and_(Note.expires_at.is_not(None), Note.expires_at <= text("now()"))
    if days is None:
        return expired
    stale = Note.updated_at < text("now() - make_interval(days => :days)").bindparams(days=days)
    return or_(expired, stale)


async def due_notes(session: AsyncSession, scope: Scope, *, limit: int) -> list[str]:
    days = await retention(session, scope)
    rows = await session.scalars(
        select(Note.id)
        .where(Note.tenant_id == scope.tenant_id, Note.project_id == scope.project_id)
        .where(_due(days), ~Note.id.startswith("."))
        .order_by(Note.id)
        .limit(limit)
    )
    return list(rows)


async def projects_with_due_notes(
    session: AsyncSession, *, limit: int
) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """Projects holding due notes and no open expiry job (system transaction)."""
    no_open_job = ~(
        select(Job.id)
        .where(Job.tenant_id == Note.tenant_id, Job.project_id == Note.project_id)
        .where(Job.kind == "expire", Job.status.in_(OPEN))
        .exists()
    )
    expired = (
        select(Note.tenant_id, Note.project_id)
        .where(Note.expires_at.is_not(None), Note.expires_at <= text("now()"), no_open_job)
        .distinct()
        .limit(limit)
    )
    found = {(r.tenant_id, r.project_id) for r in await session.execute(expired)}
    stale = (
        select(Project.tenant_id, Project.id)
        .where(Project.retention_days.is_not(None))
        .where(
            select(Note.id)
            .where(Note.tenant_id == Project.tenant_id, Note.project_id == Project.id)
            .where(~Note.id.startswith("."))
            .where(Note.updated_at < text("now() - make_interval(days => projects.retention_days)"))
            .exists()
        )
        .where(
            ~select(Job.id)
            .where(Job.tenant_id == Project.tenant_id, Job.project_id == Project.id)
            .where(Job.kind == "expire", Job.status.in_(OPEN))
            .exists()
        )
        .limit(limit)
    )
    found |= {(r.tenant_id, r.id) for r in await session.execute(stale)}
    return sorted(found)
