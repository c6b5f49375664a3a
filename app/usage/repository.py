"""All SQL touching the usage counters (written by triggers, migration 0012:
notes and stored bytes in 16 shards per tenant, jobs per UTC day), and the
model spend of each use of a model (``session_spend``, ``memory_spend``:
its calls and tokens per project and UTC day, counted here for the
sessions and memories domains, which hold their budgets)."""

from __future__ import annotations

from datetime import date
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncSession

from app.tenancy import Scope, TenantScope


async def stored(session: AsyncSession, tenant: TenantScope) -> tuple[int, int]:
    """The tenant's notes and stored bytes (notes, versions and parts)."""
    row = (
        await session.execute(
            text(
                "SELECT coalesce(sum(notes), 0) AS notes, coalesce(sum(bytes), 0) AS bytes "
                "FROM usage_counters WHERE tenant_id = :t"
            ),
            {"t": tenant.tenant_id},
        )
    ).one()
    return int(row.notes), int(row.bytes)


async def jobs_on(session: AsyncSession, tenant: TenantScope, day: date) -> int:
    value = await session.scalar(
        text("SELECT coalesce(sum(jobs), 0) FROM usage_daily WHERE tenant_id = :t AND day = :d"),
        {"t": tenant.tenant_id, "d": day},
    )
    return int(value or 0)


# Where each use of a model counts its spend (the tables' owners write them).
SPEND_TABLES = {"sessions": "session_spend", "memories": "memory_spend"}


async def model_spend_on(
    session: AsyncSession, tenant: TenantScope, day: date, *, use: str = "sessions"
) -> dict[str, int]:
    """The tenant's model calls and tokens (``calls``, ``tokens_in``,
    ``tokens_out``) for one use of a model (session compression, memory
    extraction) on ``day``, summed over its projects (zeros when there
    were none)."""
    row = (
        await session.execute(
            text(
                "SELECT coalesce(sum(calls), 0) AS calls, "
                "coalesce(sum(tokens_in), 0) AS tokens_in, "
                "coalesce(sum(tokens_out), 0) AS tokens_out "
                f"FROM {SPEND_TABLES[use]} WHERE tenant_id = :t AND day = :d"
            ),
            {"t": tenant.tenant_id, "d": day},
        )
    ).one()
    return {name: int(value) for name, value in row._mapping.items()}


async def spend_on(session: AsyncSession, scope: Scope, day: date, *, use: str) -> Row[Any] | None:
    """A project's model calls, tokens and refused calls for one use on ``day``."""
    result = await session.execute(
        text(
            "SELECT calls, tokens_in, tokens_out, refused "
            f"FROM {SPEND_TABLES[use]} "
            "WHERE tenant_id = :t AND project_id = :p AND day = :d"
        ),
        {"t": scope.tenant_id, "p": scope.project_id, "d": day},
    )
    return result.one_or_none()


async def add_spend(
    session: AsyncSession,
    scope: Scope,
    *,
    use: str,
    day: date,
    calls: int = 0,
    tokens_in: int = 0,
    tokens_out: int = 0,
    refused: int = 0,
) -> None:
    """Count a project's model spend for one use (a call made, its tokens, or
    a call refused by the budget)."""
    await session.execute(
        text(
            f"INSERT INTO {SPEND_TABLES[use]} AS s "
            "(tenant_id, project_id, day, calls, tokens_in, tokens_out, refused) "
            "VALUES (:t, :p, :d, :c, :i, :o, :r) "
            "ON CONFLICT (tenant_id, project_id, day) DO UPDATE SET "
            "calls = s.calls + :c, tokens_in = s.tokens_in + :i, "
            "tokens_out = s.tokens_out + :o, refused = s.refused + :r"
        ),
        {
            "t": scope.tenant_id,
            "p": scope.project_id,
            "d": day,
            "c": calls,
            "i": tokens_in,
            "o": tokens_out,
            "r": refused,
        },
    )


async def drop_days_before(session: AsyncSession, day: date) -> None:
    """Forget daily counts older than ``day`` (system transaction: every tenant)."""
    await session.execute(text("DELETE FROM usage_daily WHERE day < :d"), {"d": day})
