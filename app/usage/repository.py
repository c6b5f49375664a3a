"""All SQL touching the usage counters (written by triggers, migration 0012:
notes and stored bytes in 16 shards per tenant, jobs per UTC day), and the
reads of the model spend (``session_spend``, ``memory_spend``, written by the
sessions and memories domains) that usage reports."""

from __future__ import annotations

from datetime import date

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.tenancy import TenantScope


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


async def drop_days_before(session: AsyncSession, day: date) -> None:
    """Forget daily counts older than ``day`` (system transaction: every tenant)."""
    await session.execute(text("DELETE FROM usage_daily WHERE day < :d"), {"d": day})
