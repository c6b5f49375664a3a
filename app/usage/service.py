"""Usage and quotas: what a tenant holds and did today, against the limits
the operator set. Stored notes and bytes are refused past their quota by the
database as the write happens (nothing half-written: the transaction rolls
back); requests and jobs per day are refused at the door (429 until 00:00
UTC)."""

from __future__ import annotations

from datetime import date
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app import ratelimit
from app.errors import DailyQuotaExceeded
from app.kit.timeutil import utcnow
from app.tenancy import Scope, TenantScope
from app.tenants import repository as tenants_repo
from app.usage import repository as repo

QUOTA_NAMES = {
    "quota_notes": "notes",
    "quota_bytes": "bytes",
    "quota_requests_per_day": "requests_per_day",
    "quota_jobs_per_day": "jobs_per_day",
}


async def daily_limits(session: AsyncSession, tenant: TenantScope) -> tuple[int | None, int | None]:
    """(requests per day, jobs per day) quotas of the tenant."""
    q = await tenants_repo.quotas(session, tenant)
    return q["quota_requests_per_day"], q["quota_jobs_per_day"]


async def check_jobs(session: AsyncSession, tenant: TenantScope, *, limit: int) -> None:
    """Refuse a write once the day's background jobs reached the quota."""
    if await repo.jobs_on(session, tenant, utcnow().date()) >= limit:
        raise DailyQuotaExceeded(
            f"quota exceeded: jobs_per_day (limit {limit}); resets at 00:00 UTC"
        )


async def usage(session: AsyncSession, tenant: TenantScope, *, redis: Any) -> dict[str, Any]:
    notes, stored = await repo.stored(session, tenant)
    quotas = await tenants_repo.quotas(session, tenant)
    today = utcnow().date()
    return {
        "notes": notes,
        "bytes": stored,
        "requests_today": await ratelimit.requests_today(redis, tenant.tenant_id),
        "jobs_today": await repo.jobs_on(session, tenant, today),
        "model_tokens_today": await repo.model_spend_on(session, tenant, today),
        "memory_tokens_today": await repo.model_spend_on(session, tenant, today, use="memories"),
        "quotas": {QUOTA_NAMES[k]: v for k, v in quotas.items()},
    }


async def stored(session: AsyncSession, tenant: TenantScope) -> tuple[int, int]:
    """(notes, bytes) the tenant holds."""
    return await repo.stored(session, tenant)


async def drop_days_before(session: AsyncSession, *, day: date) -> None:
    """Forget daily counts older than ``day`` (system transaction: every tenant)."""
    await repo.drop_days_before(session, day)


async def spend_on(session: AsyncSession, scope: Scope, day: date, *, use: str) -> Any:
    """A project's model spend for one use (``sessions``, ``memories``) on
    ``day``: a row of calls, tokens_in, tokens_out, refused, or None."""
    return await repo.spend_on(session, scope, day, use=use)


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
    """Count a project's model spend for one use."""
    await repo.add_spend(
        session, scope, use=use, day=day, calls=calls, tokens_in=tokens_in,
        tokens_out=tokens_out, refused=refused,
    )  # fmt: skip
