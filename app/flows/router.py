"""keep's flow endpoint: the one route every keep client speaks."""

from __future__ import annotations

from fastapi import Request

from app.deps import LimitsDep, ReadScope, SessionDep
from app.flows import service
from app.flows.schemas import FlowRequest, FlowResult
from app.flows.states import FlowContext
from app.wire import api_router

router = api_router(prefix="/v1", tags=["keep"])


@router.post("/flow", response_model=FlowResult, summary="Run a keep flow")
async def flow(
    body: FlowRequest, request: Request, scope: ReadScope, session: SessionDep, limits: LimitsDep
) -> FlowResult:
    """keep's `POST /v1/flow`: run a named state (`put`, `get`, `find`,
    `query-resolve`, `list`, `list_versions`, `tag`, `delete`, `move`, `stub`,
    `prompt`, `stats`, and keep's private `compat-get-item`, `compat-find`,
    `compat-analyze`). Flow-level failures are 200 with `status: "error"` and
    the reason in `data`; write states need a key with the `write` scope."""
    ctx = FlowContext(
        session=session,
        scope=scope,
        embedder=request.app.state.embedder,
        cache=request.app.state.query_cache,
        limits=limits,
    )
    return await service.run(ctx, body)
