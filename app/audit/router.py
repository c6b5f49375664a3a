"""GET /v1/audit: the tenant's audit trail (admin credentials; read only)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated

from fastapi import Query

from app.audit import repository as repo
from app.audit import service
from app.audit.schemas import AuditEntry, AuditPage
from app.deps import AdminScope, SessionDep
from app.errors import BadRequest
from app.kit.timeutil import parse_instant
from app.wire import api_router

router = api_router(prefix="/v1", tags=["audit"])


ISO = "ISO-8601 date-time with a zone, e.g. 2026-11-24T10:00:00Z."


def _instant(raw: str | None, name: str) -> datetime | None:
    if raw is None:
        return None
    try:
        return parse_instant(raw)
    except ValueError as exc:
        raise BadRequest(f"invalid {name} {raw[:40]!r}: {ISO}") from exc


@router.get("/audit", response_model=AuditPage, summary="The audit trail")
async def audit(
    scope: AdminScope,
    session: SessionDep,
    action: Annotated[str | None, Query(max_length=100, description="Action prefix.")] = None,
    actor: Annotated[str | None, Query(max_length=300)] = None,
    target: Annotated[str | None, Query(max_length=3000)] = None,
    outcome: Annotated[str | None, Query(pattern="^(ok|error)$")] = None,
    project_id: uuid.UUID | None = None,
    since: Annotated[str | None, Query(max_length=64, description=ISO)] = None,
    until: Annotated[str | None, Query(max_length=64, description=ISO)] = None,
    cursor: Annotated[
        str | None, Query(description="`next_cursor` of the previous page (opaque).")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> AuditPage:
    """Writes, administration and authentication events of the caller's
    tenant, newest first, with filters and paging. The log cannot be edited
    through the API; entries older than the retention are dropped."""
    page = await service.entries(
        session,
        scope,
        query=repo.AuditQuery(
            action=action, actor=actor, target=target, outcome=outcome, project_id=project_id,
            since=_instant(since, "since"), until=_instant(until, "until"), limit=limit,
        ),
        cursor=cursor,
    )  # fmt: skip
    return AuditPage(
        entries=[AuditEntry(**service.view(r)) for r in page.entries],
        next_cursor=page.next_cursor,
    )
