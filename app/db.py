"""Engine, sessions and the tenant-scoped transaction.

Row-level security keys on two per-transaction settings: ``keepmem.tenant_id``
(a tenant's requests) and ``keepmem.system`` (the admin API and the outbox
dispatcher). Both are set with ``set_config(..., true)``, so they end with the
transaction and never leak to the next user of a pooled connection.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy import text
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from app.settings import Settings


def async_url(url: str) -> str:
    """Accept plain ``postgresql://`` URLs and use the asyncpg driver."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+asyncpg://" + url[len(prefix) :]
    return url


class Database:
    """One engine and session factory per process, created by the app lifespan."""

    def __init__(self, url: str, *, pool_size: int = 10, max_overflow: int = 10) -> None:
        self.engine: AsyncEngine = create_async_engine(
            async_url(url),
            pool_size=pool_size,
            max_overflow=max_overflow,
            pool_pre_ping=True,
        )
        self.sessions = async_sessionmaker(self.engine, expire_on_commit=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> Database:
        if not settings.database_url:
            raise RuntimeError("KEEPMEM_DATABASE_URL is not set")
        return cls(
            settings.database_url,
            pool_size=settings.db_pool_size,
            max_overflow=settings.db_max_overflow,
        )

    async def dispose(self) -> None:
        await self.engine.dispose()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncSession]:
        """A session in one transaction with no tenant set; commits on success."""
        async with self.sessions() as session, session.begin():
            yield session

    @asynccontextmanager
    async def tenant_transaction(self, tenant_id: uuid.UUID) -> AsyncIterator[AsyncSession]:
        async with self.transaction() as session:
            await set_tenant(session, tenant_id)
            yield session

    @asynccontextmanager
    async def system_transaction(self) -> AsyncIterator[AsyncSession]:
        async with self.transaction() as session:
            await set_system(session)
            yield session


async def set_tenant(session: AsyncSession, tenant_id: uuid.UUID) -> None:
    """Bind the current transaction to one tenant for row-level security."""
    await session.execute(
        text("SELECT set_config('keepmem.tenant_id', :tid, true)"), {"tid": str(tenant_id)}
    )


async def set_system(session: AsyncSession) -> None:
    """Let the current transaction see every tenant (admin API, dispatcher)."""
    await session.execute(text("SELECT set_config('keepmem.system', 'on', true)"))
