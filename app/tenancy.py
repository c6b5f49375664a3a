"""Tenancy in one module: the scopes every repository call takes, who may
mint them, and binding one to a transaction.

``TenantScope`` is a tenant as a resolved credential sees it (no project
yet); ``Scope`` adds the project. Both can be minted only here, by the API's
auth dependency (``mint_tenant`` then ``mint``, after a key resolved), by
tenant administration for a project it just made (``scope_for_project``) and
by the worker from a job's own ids (``tenant_for_jobs``, ``scope_for_job``).
Everything else receives one and passes it on.

Row-level security keys on per-transaction settings: ``keepmem.tenant_id``
(a tenant's work), ``keepmem.tag_scope`` (a tag-scoped credential's terms,
in the text form of a ``text[]``), ``keepmem.oauth`` (the OAuth endpoints'
view of the OAuth tables) and ``keepmem.system`` (the admin API and the
outbox dispatcher, which see every tenant). A tag-scoped transaction also
switches to the scoped role (``SET LOCAL ROLE``), the one the tag-scope
policies apply to. All are set with ``set_config(..., true)``, so they end
with the transaction and never leak to the next user of a pooled connection.
Nothing else in the code base sets them (tests/test_architecture.py checks).

The API's unit of work binds the request's scope (``app.deps``); the worker
binds each job's scope through :func:`transaction`; tests and operators'
tools that start from a bare id use :func:`tenant_id_transaction` and
:func:`system_transaction`.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.db import Database

READ = "read"
WRITE = "write"
ADMIN = "admin"
ALL_SCOPES = (READ, WRITE, ADMIN)

_MINT = object()


@dataclass(frozen=True, slots=True, kw_only=True)
class TenantScope:
    """``credential`` names who acts ("key:<id>", "grant:<id>",
    "oidc:<issuer id>:<subject>", or "" for the system); ``key_id`` is set
    for an API key. A credential may be locked to one project
    (``project_lock``) and to a tag scope (``tag_terms``, casefolded
    ``key=value``): row-level security then shows it only notes carrying
    every term, and its writes are stamped with them."""

    tenant_id: uuid.UUID
    key_id: uuid.UUID | None = None
    credential: str = ""
    permissions: frozenset[str] = frozenset()
    project_lock: uuid.UUID | None = None
    tag_terms: tuple[str, ...] = ()
    expires_at: datetime | None = None
    _token: object = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._token is not _MINT:
            raise TypeError("scopes are minted by app.tenancy only")

    @property
    def actor(self) -> str:
        return self.credential or "system"


@dataclass(frozen=True, slots=True, kw_only=True)
class Scope(TenantScope):
    project_id: uuid.UUID
    project_slug: str = ""


def mint_tenant(
    *,
    tenant_id: uuid.UUID,
    key_id: uuid.UUID | None,
    permissions: frozenset[str],
    credential: str = "",
    project_lock: uuid.UUID | None = None,
    tag_terms: Iterable[str] = (),
    expires_at: datetime | None = None,
) -> TenantScope:
    """A resolved credential's tenant, before its project is known."""
    return TenantScope(
        tenant_id=tenant_id,
        key_id=key_id,
        credential=credential or (f"key:{key_id}" if key_id else ""),
        permissions=permissions,
        project_lock=project_lock,
        tag_terms=tuple(sorted(set(tag_terms))),
        expires_at=expires_at,
        _token=_MINT,
    )


def mint(tenant: TenantScope, *, project_id: uuid.UUID, project_slug: str) -> Scope:
    """The request's scope: the credential's tenant and the project it works in."""
    if tenant.project_lock is not None and tenant.project_lock != project_id:
        raise ValueError("a project-locked credential cannot act in another project")
    return Scope(
        tenant_id=tenant.tenant_id,
        key_id=tenant.key_id,
        credential=tenant.credential,
        permissions=tenant.permissions,
        project_lock=tenant.project_lock,
        tag_terms=tenant.tag_terms,
        expires_at=tenant.expires_at,
        project_id=project_id,
        project_slug=project_slug,
        _token=_MINT,
    )


def _system_tenant(tenant_id: uuid.UUID) -> TenantScope:
    return TenantScope(tenant_id=tenant_id, permissions=frozenset(ALL_SCOPES), _token=_MINT)


def _system_scope(tenant_id: uuid.UUID, project_id: uuid.UUID, project_slug: str) -> Scope:
    tenant = _system_tenant(tenant_id)
    return mint(tenant, project_id=project_id, project_slug=project_slug)


def scope_for_project(tenant_id: uuid.UUID, project_id: uuid.UUID, project_slug: str) -> Scope:
    """Full rights on a project, for the administration that created it."""
    return _system_scope(tenant_id, project_id, project_slug)


def tenant_for_admin(tenant_id: uuid.UUID) -> TenantScope:
    """A tenant as tenant administration (admin API, CLI) acts on it."""
    return _system_tenant(tenant_id)


def tenant_for_jobs(tenant_id: uuid.UUID) -> TenantScope:
    """The tenant a batch of jobs belongs to (claiming them, before their projects)."""
    return _system_tenant(tenant_id)


def scope_for_job(tenant_id: uuid.UUID, project_id: uuid.UUID, project_slug: str = "") -> Scope:
    """A scope for background work, rebuilt from the ids a job carries."""
    return _system_scope(tenant_id, project_id, project_slug)


# -- binding a scope to a transaction --------------------------------------------


async def bind(session: AsyncSession, scope: TenantScope) -> None:
    """Bind the current transaction to the scope's tenant (and its tag scope)."""
    if scope.tag_terms:
        # The terms travel as an array and are stored in PostgreSQL's own
        # text form of it (quoting done by the server): the policies read
        # them back with a plain cast, an expression the planner inlines
        # and can use as a GIN index key (migration 0020).
        await session.execute(
            text(
                "SELECT set_config('keepmem.tenant_id', :tid, true), "
                "set_config('keepmem.tag_scope', CAST(CAST(:terms AS text[]) AS text), true), "
                "set_config('role', keepmem_scoped_role(), true)"
            ),
            {"tid": str(scope.tenant_id), "terms": list(scope.tag_terms)},
        )
        return
    await _bind_tenant_id(session, scope.tenant_id)


async def bind_oauth(session: AsyncSession) -> None:
    """Let the current transaction see the OAuth tables of every tenant (the
    token, revocation, introspection and registration endpoints, which run
    before a tenant is known); other tenant tables stay closed to it."""
    await session.execute(text("SELECT set_config('keepmem.oauth', 'on', true)"))


async def bind_system(session: AsyncSession) -> None:
    """Let the current transaction see every tenant (admin API, dispatcher)."""
    await session.execute(text("SELECT set_config('keepmem.system', 'on', true)"))


@asynccontextmanager
async def transaction(db: Database, scope: TenantScope) -> AsyncIterator[AsyncSession]:
    """A transaction bound to the scope's tenant; commits on success."""
    async with db.transaction() as session:
        await bind(session, scope)
        yield session


@asynccontextmanager
async def system_transaction(db: Database) -> AsyncIterator[AsyncSession]:
    async with db.transaction() as session:
        await bind_system(session)
        yield session


@asynccontextmanager
async def tenant_id_transaction(db: Database, tenant_id: uuid.UUID) -> AsyncIterator[AsyncSession]:
    """A transaction bound to a bare tenant id: for tests, benchmarks and
    operators' tools that start from an id, never for request or job code
    (which holds a scope)."""
    async with db.transaction() as session:
        await _bind_tenant_id(session, tenant_id)
        yield session


async def _bind_tenant_id(session: AsyncSession, tenant_id: uuid.UUID) -> None:
    await session.execute(
        text("SELECT set_config('keepmem.tenant_id', :tid, true)"), {"tid": str(tenant_id)}
    )
