"""A project's memory settings: the ``memories`` key of its settings
document (the extraction budget), with the server's defaults."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.tenancy import Scope
from app.tenants import service as tenants

KEY = "memories"


def own(raw: Any) -> int | None:
    """The project's own budget in its ``memories`` settings (None: the server's)."""
    if isinstance(raw, dict):
        value = raw.get("llm_tokens_per_day")
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


async def budget_of(session: AsyncSession, scope: Scope, server_budget: int) -> int:
    """The project's extraction tokens per UTC day: its own setting, never
    above the server's."""
    mine = own((await tenants.project_settings(session, scope)).get(KEY))
    return server_budget if mine is None else min(mine, server_budget)


async def update(session: AsyncSession, scope: Scope, *, llm_tokens_per_day: int | None) -> None:
    current = (await tenants.project_settings(session, scope)).get(KEY)
    merged = {**(current if isinstance(current, dict) else {})}
    merged["llm_tokens_per_day"] = llm_tokens_per_day
    await tenants.set_project_setting(session, scope, key=KEY, value=merged)
