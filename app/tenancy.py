"""Tenancy in one module: binding a scope to a transaction.

Row-level security keys on per-transaction settings: ``keepmem.tenant_id``
(a tenant's work), ``keepmem.tag_scope`` (a tag-scoped credential's terms),
``keepmem.oauth`` (the OAuth endpoints' view of the OAuth tables) and
``keepmem.system`` (the admin API and the outbox dispatcher, which see every
tenant). A tag-scoped transaction also switches to the scoped role (``SET
LOCAL ROLE``), the one the tag-scope policies apply to. All are set with
``set_config(..., true)``, so they end with the transaction and never leak to
the next user of a pooled connection. Nothing else in the code base sets
them (tests/test_architecture.py checks).

The API's unit of work binds the request's scope (``app.deps``); the worker
binds each job's scope through :func:`transaction`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth.scope import TenantScope
from app.db import Database


async def bind(session: AsyncSession, scope: TenantScope) -> None:
    """Bind the current transaction to the scope's tenant (and its tag scope)."""
    if scope.tag_terms:
        await session.execute(
            text(
                "SELECT set_config('keepmem.tenant_id', :tid, true), "
                "set_config('keepmem.tag_scope', :terms, true), "
                "set_config('role', keepmem_scoped_role(), true)"
            ),
            {"tid": str(scope.tenant_id), "terms": json.dumps(list(scope.tag_terms))},
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
