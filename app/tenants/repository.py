"""All SQL touching tenants and projects."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Text, delete, func, literal, select, text, update
from sqlalchemy.dialects.postgresql import JSONB, insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.db import Params, driver, json_value
from app.models import Note, Project, Tenant
from app.tenancy import Scope, TenantScope


async def insert_tenant(session: AsyncSession, name: str) -> Tenant | None:
    """Insert a tenant; None when the name is taken."""
    tenant_id = await session.scalar(
        insert(Tenant)
        .values(name=name)
        .on_conflict_do_nothing(index_elements=["name"])
        .returning(Tenant.id)
    )
    if tenant_id is None:
        return None
    return await session.get(Tenant, tenant_id)


async def list_tenants(session: AsyncSession) -> Sequence[Tenant]:
    return (await session.execute(select(Tenant).order_by(Tenant.created_at))).scalars().all()


async def get_tenant(session: AsyncSession, tenant_id: uuid.UUID) -> Tenant | None:
    return await session.get(Tenant, tenant_id)


async def get_tenant_by_name(session: AsyncSession, name: str) -> Tenant | None:
    return await session.scalar(select(Tenant).where(Tenant.name == name))


async def get_project(session: AsyncSession, tenant: TenantScope, slug: str) -> Project | None:
    return await session.scalar(
        select(Project).where(Project.tenant_id == tenant.tenant_id, Project.slug == slug)
    )


async def project_slug(
    session: AsyncSession, tenant: TenantScope, project_id: uuid.UUID
) -> str | None:
    return await session.scalar(
        select(Project.slug).where(Project.tenant_id == tenant.tenant_id, Project.id == project_id)
    )


async def count_projects(session: AsyncSession, tenant: TenantScope) -> int:
    return int(
        await session.scalar(
            select(func.count()).select_from(Project).where(Project.tenant_id == tenant.tenant_id)
        )
        or 0
    )


async def list_projects(
    session: AsyncSession, tenant: TenantScope, *, limit: int
) -> Sequence[Project]:
    """The tenant's projects by slug (only the locked one for a locked credential)."""
    query = select(Project).where(Project.tenant_id == tenant.tenant_id)
    if tenant.project_lock is not None:
        query = query.where(Project.id == tenant.project_lock)
    return (await session.execute(query.order_by(Project.slug).limit(limit))).scalars().all()


async def projects_lacking(session: AsyncSession, note_ids: Sequence[str]) -> Sequence[Project]:
    """Every tenant's projects that lack a note with one of ``note_ids``
    (keep's schema docs, when a newer keepmem ships more): one statement,
    however many projects already hold them all. System transactions only."""
    wanted = sorted(set(note_ids))
    held = (
        select(func.count())
        .select_from(Note)
        .where(
            Note.tenant_id == Project.tenant_id,
            Note.project_id == Project.id,
            Note.id.in_(wanted),
        )
        .scalar_subquery()
    )
    query = select(Project).where(held < len(wanted))
    return (await session.execute(query.order_by(Project.tenant_id, Project.slug))).scalars().all()


async def insert_project(session: AsyncSession, tenant: TenantScope, slug: str) -> Project | None:
    """Insert a project; None if a concurrent request created it first."""
    project_id = await session.scalar(
        insert(Project)
        .values(tenant_id=tenant.tenant_id, slug=slug)
        .on_conflict_do_nothing(index_elements=["tenant_id", "slug"])
        .returning(Project.id)
    )
    if project_id is None:
        return None
    return await session.get(Project, (tenant.tenant_id, project_id))


def project_settings_sql(p: Params, scope: Scope) -> str:
    """The project's settings as a scalar subquery (find reads them in its
    opening statement, with other values)."""
    return (
        f"(SELECT settings FROM projects WHERE tenant_id = {p.once('tenant', scope.tenant_id)} "
        f"AND id = {p.once('project', scope.project_id)})"
    )


async def project_settings(session: AsyncSession, scope: Scope) -> dict[str, Any]:
    p = Params()
    sql = f"SELECT {project_settings_sql(p, scope)}"
    return dict(json_value(await (await driver(session)).fetchval(sql, *p.values)) or {})


async def set_project_setting(session: AsyncSession, scope: Scope, *, key: str, value: Any) -> None:
    """One key of the project's settings (the rest are left as they are)."""
    await session.execute(
        update(Project)
        .where(Project.tenant_id == scope.tenant_id, Project.id == scope.project_id)
        .values(
            settings=Project.settings.op("||")(
                func.jsonb_build_object(literal(key, Text), literal(value, JSONB))
            )
        )
    )


async def clear_project_setting(session: AsyncSession, scope: Scope, *, key: str) -> None:
    """Remove one key of the project's settings (its readers fall back to the
    server's default)."""
    await session.execute(
        update(Project)
        .where(Project.tenant_id == scope.tenant_id, Project.id == scope.project_id)
        .values(settings=Project.settings.op("-")(literal(key, Text)))
    )


QUOTAS = ("quota_notes", "quota_bytes", "quota_requests_per_day", "quota_jobs_per_day")


async def quotas(session: AsyncSession, tenant: TenantScope) -> dict[str, int | None]:
    row = (
        await session.execute(
            select(
                Tenant.quota_notes,
                Tenant.quota_bytes,
                Tenant.quota_requests_per_day,
                Tenant.quota_jobs_per_day,
            ).where(Tenant.id == tenant.tenant_id)
        )
    ).first()
    return dict(zip(QUOTAS, row, strict=True)) if row is not None else dict.fromkeys(QUOTAS)


async def set_quotas(
    session: AsyncSession, tenant: TenantScope, values: dict[str, int | None]
) -> bool:
    result = await session.execute(
        update(Tenant).where(Tenant.id == tenant.tenant_id).values(**values).returning(Tenant.id)
    )
    return result.first() is not None


async def delete_project(session: AsyncSession, tenant: TenantScope, project_id: uuid.UUID) -> int:
    """Delete a project; every row of it goes with it (foreign keys cascade).
    Returns how many notes it held."""
    notes = await session.scalar(
        select(func.count())
        .select_from(Note)
        .where(Note.tenant_id == tenant.tenant_id, Note.project_id == project_id)
    )
    await session.execute(
        delete(Project).where(Project.tenant_id == tenant.tenant_id, Project.id == project_id)
    )
    return int(notes or 0)


async def delete_tenant(session: AsyncSession, tenant: TenantScope) -> None:
    """Delete a tenant; every row of it goes with it (foreign keys cascade)."""
    await session.execute(delete(Tenant).where(Tenant.id == tenant.tenant_id))


async def cors_origins(session: AsyncSession) -> set[str]:
    """Every origin any project allows (a system transaction: the
    preflights' answer, which comes before any credential)."""
    rows = await session.execute(
        text(
            "SELECT DISTINCT jsonb_array_elements_text(settings->'cors_origins') FROM projects "
            "WHERE jsonb_typeof(settings->'cors_origins') = 'array'"
        )
    )
    return {str(origin) for (origin,) in rows}
