"""The project's settings (``/v1/settings``): read with a read key, changed
with an admin key."""

from __future__ import annotations

from fastapi import Request

from app import cors
from app.deps import AdminScope, ReadScope, SessionDep
from app.project_settings import service
from app.project_settings.schemas import ProjectSettings, SettingsChange
from app.wire import api_router

router = api_router(prefix="/v1", tags=["projects"])


@router.get("/settings", response_model=ProjectSettings, summary="The project's settings")
async def get_settings(scope: ReadScope, session: SessionDep) -> ProjectSettings:
    """Every setting of the request's project (``X-Project``), the server's
    defaults filled in: sanitising at ingest, find's recency half-life,
    auto-tagging, coding-agent sessions and memory extraction."""
    return ProjectSettings(**await service.current(session, scope))


@router.patch("/settings", response_model=ProjectSettings, summary="Change the project's settings")
async def patch_settings(
    body: SettingsChange, request: Request, scope: AdminScope, session: SessionDep
) -> ProjectSettings:
    """Change the settings given; the others keep their values, and null
    puts a setting back to the server's default. ``sessions`` and
    ``memories`` change field by field, as their own routes do. Recorded in
    the audit trail (``project.settings``, with the values changed). Takes
    effect for the next request (intake on other API processes within
    seconds)."""
    out = ProjectSettings(**await service.change(session, scope, changes=body))
    if "cors_origins" in body.model_fields_set:
        cors.forget(scope)  # this process at once, the others within seconds
    if "sessions" in body.model_fields_set:
        key = (scope.tenant_id, scope.project_id)
        request.app.state.caches.session_settings.drop(lambda k: k == key)
    return out
