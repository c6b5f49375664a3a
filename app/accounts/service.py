"""Accounts: a tenant made with its first key and seeded default project, a
project made (and seeded) on first use, a key resolved to its scope outside
a request, and a tenant's usage for the operator. Erasure is
``app.erasure``'s.

These use cases sit above the registry (``app.tenants``), keys
(``app.auth``), notes (the seeded system docs) and usage."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app import tenancy
from app.audit import repository as audit
from app.auth import service as auth_service
from app.errors import BadRequest, ProjectLimit, ProjectNotFound, TenantExists
from app.grounding import passages
from app.kit.ids import InvalidId, validate_project_slug
from app.models import Project, Tenant
from app.notes import service as notes_service
from app.tenancy import ALL_SCOPES, Scope, TenantScope, mint, scope_for_project, tenant_for_admin
from app.tenants import repository as repo
from app.tenants import service as tenants
from app.usage import service as usage_service

MAX_TENANT_NAME = 200


@dataclass(slots=True)
class NewTenant:
    tenant: Tenant
    key: auth_service.NewKey


async def create_tenant(
    session: AsyncSession, *, name: str, server_secret: str, actor: str = "admin"
) -> NewTenant:
    """A tenant, its default project (seeded) and a first read/write/admin key.

    Runs in a system transaction; the key is returned once and never again.
    """
    name = name.strip()
    if not name or len(name) > MAX_TENANT_NAME or not name.isprintable():
        raise BadRequest(f"tenant name must be 1-{MAX_TENANT_NAME} printable characters")
    tenant = await tenants.add_tenant(session, name=name)
    if tenant is None:
        raise TenantExists(f"a tenant named {name!r} already exists")
    # A system transaction (row-level security lets it act for the new tenant).
    await _make_project(session, tenant_for_admin(tenant.id), tenants.DEFAULT_PROJECT)
    key = await auth_service.create_key(
        session,
        tenant_id=tenant.id,
        name="initial",
        scopes=list(ALL_SCOPES),
        expires_at=None,
        server_secret=server_secret,
        actor=actor,
    )
    await audit.record(
        session,
        tenant_for_admin(tenant.id),
        actor=actor,
        action="tenant.create",
        target=str(tenant.id),
        detail={"name": name},
    )
    return NewTenant(tenant=tenant, key=key)


async def resolve_project_created(
    session: AsyncSession,
    tenant: TenantScope,
    *,
    slug: str,
    may_create: bool,
    max_projects: int | None,
) -> tuple[Project, bool]:
    """The tenant's project with this slug, and whether this call created it.

    The one place a project is made on first use (the X-Project header,
    keep's storage backend, OAuth consent): only when ``may_create`` (the
    credential may make projects, ``tenants.may_create_projects``) and the
    tenant has fewer than ``max_projects`` (else 403 ``project_limit``).
    Every caller states both, so none can forget the cap."""
    try:
        validate_project_slug(slug)
    except InvalidId as exc:
        raise BadRequest(str(exc)) from exc
    project = await repo.get_project(session, tenant, slug)
    if project is not None:
        return project, False
    if not may_create:
        raise ProjectNotFound(
            f"project {slug!r} does not exist; a key with the 'write' scope creates it on first use"
        )
    if max_projects is not None and await repo.count_projects(session, tenant) >= max_projects:
        raise ProjectLimit(f"this tenant already has the maximum of {max_projects} projects")
    return await _make_project(session, tenant, slug)


async def _make_project(
    session: AsyncSession, tenant: TenantScope, slug: str
) -> tuple[Project, bool]:
    project = await tenants.add_project(session, tenant, slug=slug)
    if project is None:  # created concurrently; it is seeded by its creator
        found = await repo.get_project(session, tenant, slug)
        assert found is not None
        return found, False
    scope = scope_for_project(project.tenant_id, project.id, project.slug)
    await notes_service.seed_system_docs(session, scope)
    return project, True


async def seed_every_project(session: AsyncSession) -> int:
    """keep's schema docs a project does not hold yet (a new keepmem or
    keep-skill ships more), written into every project; a doc a project
    holds is left as the project made it. Run by ``keepmem migrate`` and
    ``keepmem up`` in a system transaction: one statement finds the projects
    that lack one, so a start where every project is up to date costs that
    statement alone. Returns how many were written."""
    written = 0
    for project in await tenants.projects_lacking(session, notes_service.system_doc_ids()):
        scope = scope_for_project(project.tenant_id, project.id, project.slug)
        written += await notes_service.seed_system_docs(session, scope, backfill=True)
    return written


async def rechunk(
    session: AsyncSession, tenant_id: uuid.UUID, *, project: str | None, min_chars: int
) -> dict[str, dict[str, int]]:
    """Queue chunk jobs for every long note (with held or kept text) of a
    tenant's projects (or one), through the pipeline: per project slug, the
    jobs queued and the long notes whose text is no longer there."""
    out: dict[str, dict[str, int]] = {}
    for row in await tenants.list_projects(session, tenant_for_admin(tenant_id)):
        if project is not None and row.slug != project:
            continue
        scope = scope_for_project(row.tenant_id, row.id, row.slug)
        counts = {"queued": 0, "without_text": 0}
        after: str | None = ""
        while after is not None:
            done = await passages.rechunk(session, scope, min_chars=min_chars, after=after)
            counts["queued"] += done.queued
            counts["without_text"] += done.without_text
            after = done.next_after
        out[row.slug] = counts
    return out


async def usage_of(session: AsyncSession, tenant_id: uuid.UUID, redis: Any) -> dict[str, Any]:
    """A tenant's usage and quotas, for the operator."""
    await tenants.get_tenant(session, tenant_id)
    return await usage_service.usage(session, tenant_for_admin(tenant_id), redis=redis)


async def scope_for_key(
    session: AsyncSession,
    *,
    presented: str,
    server_secret: str,
    slug: str | None,
    max_projects: int | None,
) -> Scope:
    """An API key resolved outside an HTTP request (keep's storage backend):
    its tenant bound to the transaction, and its project chosen and made as
    for a request (``slug`` as the X-Project header) — exactly the scope the
    same key gets from the REST API."""
    credential = await auth_service.resolve_credential(
        session, presented=presented, server_secret=server_secret, verifier=None
    )
    tenant = credential.tenant
    await tenancy.bind(session, tenant)
    slug = await tenants.project_slug_for(
        session, tenant, forced=credential.project_slug, asked=slug
    )
    project, _ = await resolve_project_created(
        session,
        tenant,
        slug=slug,
        may_create=tenants.may_create_projects(tenant),
        max_projects=max_projects,
    )
    tenants.check_lock(tenant, project.id, slug)
    return mint(tenant, project_id=project.id, project_slug=slug)
