"""GET /v1/usage: the tenant's current figures and quotas."""

from __future__ import annotations

from fastapi import Request
from pydantic import BaseModel, Field, field_validator

from app.deps import AdminScope, SessionDep
from app.usage import service
from app.wire import api_router, not_text

router = api_router(prefix="/v1", tags=["usage"])


class Quotas(BaseModel):
    notes: int | None = Field(default=None, ge=0, le=10**15, description="None: unlimited.")
    bytes: int | None = Field(default=None, ge=0, le=10**15)
    requests_per_day: int | None = Field(default=None, ge=0, le=10**15)
    jobs_per_day: int | None = Field(default=None, ge=0, le=10**15)

    _whole = field_validator("*", mode="before")(not_text)


class Usage(BaseModel):
    notes: int = Field(description="Notes stored (every project).")
    bytes: int = Field(description="Bytes stored: summaries, tags and held content.")
    requests_today: int | None = Field(description="API requests since 00:00 UTC.")
    jobs_today: int = Field(description="Background jobs queued since 00:00 UTC.")
    quotas: Quotas


@router.get("/usage", response_model=Usage, summary="Usage and quotas")
async def usage(request: Request, scope: AdminScope, session: SessionDep) -> Usage:
    """What the tenant holds and did today, and the quotas the operator set
    (past one, writes get 403 or, for a daily quota, 429 naming it)."""
    return Usage(**await service.usage(session, scope, request.app.state.redis))
