"""The registry of tenants and projects: reading them, a tenant's quotas, a
project's settings (whether it sanitises at ingest) and which project a
credential works in. Creating tenants and projects, and erasing them, is
``app.accounts``'s (it seeds notes and makes keys, which sit above this)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.audit import repository as audit
from app.errors import (
    BadRequest,
    Forbidden,
    ProjectNotFound,
    TenantNotFound,
)
from app.kit import redaction
from app.models import Project, Tenant
from app.tenancy import (
    ADMIN,
    WRITE,
    Scope,
    TenantScope,
    tenant_for_admin,
)
from app.tenants import repository as repo

DEFAULT_PROJECT = "default"


async def sanitizing(session: AsyncSession, scope: Scope) -> bool:
    """Whether the project sanitises at ingest (on unless its settings say
    ``sanitize: false``)."""
    return redaction.enabled(await repo.project_settings(session, scope))


async def project_settings(session: AsyncSession, scope: Scope) -> dict[str, Any]:
    """The project's settings document."""
    return await repo.project_settings(session, scope)


async def set_project_setting(session: AsyncSession, scope: Scope, *, key: str, value: Any) -> None:
    """Replace one key of the project's settings."""
    await repo.set_project_setting(session, scope, key=key, value=value)


async def clear_project_setting(session: AsyncSession, scope: Scope, *, key: str) -> None:
    """Remove one key of the project's settings: back to the server's default."""
    await repo.clear_project_setting(session, scope, key=key)


async def list_tenants(session: AsyncSession) -> Sequence[Tenant]:
    return await repo.list_tenants(session)


async def get_tenant(session: AsyncSession, tenant_id: uuid.UUID) -> Tenant:
    tenant = await repo.get_tenant(session, tenant_id)
    if tenant is None:
        raise TenantNotFound(f"tenant not found: {tenant_id}")
    return tenant


async def get_tenant_by_name(session: AsyncSession, name: str) -> Tenant:
    tenant = await repo.get_tenant_by_name(session, name)
    if tenant is None:
        raise TenantNotFound(f"tenant not found: {name}")
    return tenant


MAX_LISTED_PROJECTS = 1000


async def list_projects(session: AsyncSession, tenant: TenantScope) -> Sequence[Project]:
    return await repo.list_projects(session, tenant, limit=MAX_LISTED_PROJECTS)


async def projects_lacking(session: AsyncSession, note_ids: Sequence[str]) -> Sequence[Project]:
    """Every tenant's projects without a note of one of ``note_ids``."""
    return await repo.projects_lacking(session, note_ids) if note_ids else []


async def slug_of(session: AsyncSession, tenant: TenantScope, *, project_id: uuid.UUID) -> str:
    slug = await repo.project_slug(session, tenant, project_id)
    if slug is None:
        raise ProjectNotFound("the project this credential is restricted to no longer exists")
    return slug


async def set_quotas(
    session: AsyncSession, tenant_id: uuid.UUID, changes: Mapping[str, int | None], *, actor: str
) -> None:
    """Change the quotas named in ``changes`` (a number: that limit, 0
    allowing nothing; None: unlimited); the others stay as they are.
    Recorded in the tenant's audit trail."""
    unknown = sorted(set(changes) - set(QUOTAS))
    if unknown:
        raise BadRequest(f"unknown quotas {unknown}; quotas are {list(QUOTAS)}")
    if not changes:
        await get_tenant(session, tenant_id)  # nothing to change, but it must exist
        return
    values = {f"quota_{name}": value for name, value in changes.items()}
    if not await repo.set_quotas(session, tenant_for_admin(tenant_id), values):
        raise TenantNotFound(f"tenant not found: {tenant_id}")
    await audit.record(
        session,
        tenant_for_admin(tenant_id),
        actor=actor,
        action="tenant.quotas",
        target=str(tenant_id),
        detail=dict(changes),
    )


QUOTAS = ("notes", "bytes", "requests_per_day", "jobs_per_day")


async def project_slug_for(
    session: AsyncSession, tenant: TenantScope, *, forced: str | None, asked: str | None
) -> str:
    """The project a credential works in: the one asked for (the X-Project
    header), else the one its token names (``forced``), else the one it is
    locked to, else the default. Asking for another than ``forced`` is 403;
    asked but empty is a client bug, not a request for the default."""
    if asked is not None:
        slug = asked.strip()
        if forced is not None and slug != forced:
            raise Forbidden(f"this credential is restricted to project '{forced}'")
        return slug
    if forced is not None:
        return forced
    if tenant.project_lock is not None:
        return await slug_of(session, tenant, project_id=tenant.project_lock)
    return DEFAULT_PROJECT


def may_create_projects(tenant: TenantScope) -> bool:
    """Projects are made on first use by a credential that may write and is
    bound to no project and no tag scope."""
    return (
        bool({WRITE, ADMIN} & tenant.permissions)
        and tenant.project_lock is None
        and not tenant.tag_terms
    )


def check_lock(tenant: TenantScope, project_id: uuid.UUID, slug: str) -> None:
    if tenant.project_lock is not None and project_id != tenant.project_lock:
        raise Forbidden(f"this credential is restricted to another project than '{slug}'")


async def get_project(session: AsyncSession, tenant: TenantScope, *, slug: str) -> Project:
    project = await repo.get_project(session, tenant, slug)
    if project is None:
        raise ProjectNotFound(f"project {slug!r} does not exist")
    return project


async def delete_project(
    session: AsyncSession, tenant: TenantScope, *, project_id: uuid.UUID
) -> int:
    """Delete a project and every row of it (cascades); the notes it held."""
    return await repo.delete_project(session, tenant, project_id)


async def delete_tenant(session: AsyncSession, tenant: TenantScope) -> None:
    """Delete a tenant and every row of it (cascades)."""
    await repo.delete_tenant(session, tenant)


async def add_tenant(session: AsyncSession, *, name: str) -> Tenant | None:
    """A new tenant row (None: the name is taken)."""
    return await repo.insert_tenant(session, name)


async def add_project(session: AsyncSession, tenant: TenantScope, *, slug: str) -> Project | None:
    """A new project row (None: made concurrently)."""
    return await repo.insert_project(session, tenant, slug)


async def cors_origins(session: AsyncSession) -> set[str]:
    """Every origin some project allows (a system transaction)."""
    return await repo.cors_origins(session)
