"""GET /v1/usage: the tenant's current figures and quotas."""

from __future__ import annotations

from fastapi import Request

from app.deps import AdminScope, SessionDep
from app.usage import service
from app.usage.schemas import Usage
from app.wire import api_router

router = api_router(prefix="/v1", tags=["usage"])


@router.get("/usage", response_model=Usage, summary="Usage and quotas")
async def usage(request: Request, scope: AdminScope, session: SessionDep) -> Usage:
    """What the tenant holds and did today (including the model tokens spent
    on compressing coding-agent sessions), and the quotas the operator set
    (past one, writes get 403 or, for a daily quota, 429 naming it)."""
    return Usage(**await service.usage(session, scope, redis=request.app.state.redis))
