"""Coding-agent sessions (``/v1/sessions``) and collections (``/v1/collections``)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Depends, Path, Query, Request, Response

from app.deps import LimitsDep, ReadScope, SessionDep, SettingsDep, WriteScope
from app.sessions import collections, intake, service
from app.sessions import settings as project_settings
from app.sessions.schemas import (
    CheckpointList,
    CheckpointOut,
    CheckpointRequest,
    CollectionIn,
    CollectionList,
    CollectionOut,
    CollectionRun,
    EventBatch,
    IntakeOut,
    PatternList,
    ProjectSessionSettings,
    ResumeOut,
    SessionList,
    SessionOut,
    SessionPatch,
    SpendOut,
    Timeline,
)
from app.wire import api_router

router = api_router(prefix="/v1", tags=["sessions"])

SessionId = Annotated[str, Path(max_length=200, description="The host's session id.")]
CollectionName = Annotated[str, Path(max_length=100, description="The collection's name.")]


async def _project_conf(
    request: Request, scope: WriteScope, session: SessionDep
) -> project_settings.SessionSettings:
    """The project's session settings, remembered for a few seconds: intake
    cleans a batch with them before its one statement (a change made through
    another API process applies here within ``app.caches.SETTINGS_TTL``, 5 s)."""
    cache = request.app.state.caches.session_settings
    key = (scope.tenant_id, scope.project_id)
    conf: project_settings.SessionSettings | None = cache.get(key)
    if conf is None:
        conf = await project_settings.settings_of(session, scope)
        cache.put(key, conf)
    return conf


@router.post("/sessions/events", status_code=202, response_model=IntakeOut)
async def post_events(
    body: EventBatch,
    scope: WriteScope,
    session: SessionDep,
    conf: Annotated[project_settings.SessionSettings, Depends(_project_conf)],
) -> IntakeOut:
    """Take a batch of hook events (1-100) in the normalised shape
    (``docs/sessions-contract.md``): cleaned, numbered and queued for the
    worker, which stores them as notes and digests them. Nothing slow runs
    before the answer."""
    return await intake.intake(session, scope, events=body.events, conf=conf)


@router.get("/sessions", response_model=SessionList)
async def list_sessions(
    scope: ReadScope,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cwd: Annotated[str | None, Query(max_length=4096)] = None,
) -> SessionList:
    """The project's sessions, most recently active first."""
    return SessionList(sessions=await service.list_sessions(session, scope, limit=limit, cwd=cwd))


@router.get("/sessions/resume", response_model=ResumeOut)
async def resume(
    scope: ReadScope,
    session: SessionDep,
    cwd: Annotated[str, Query(max_length=4096)] = "",
    session_id: Annotated[str | None, Query(max_length=200)] = None,
    platform: Annotated[str | None, Query(max_length=40)] = None,
) -> ResumeOut:
    """The "where you left off" block for a working directory: the latest
    checkpoint, open tasks, recurring patterns and related memories, under
    the project's character budget. Empty when injection is off."""
    return await service.resume_context(session, scope, cwd=cwd, session_id=session_id)


@router.get("/sessions/patterns", response_model=PatternList)
async def patterns(
    scope: ReadScope,
    session: SessionDep,
    kind: Annotated[
        list[Literal["error", "fix", "decision", "preference", "todo"]],
        Query(description="Kinds wanted; all when left out."),
    ] = [],  # noqa: B006
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> PatternList:
    """What recurs across the project's sessions, most widespread first."""
    found = await service.patterns(session, scope, kinds=list(kind) or None, limit=limit)
    return PatternList(patterns=found)


@router.get("/sessions/settings", response_model=ProjectSessionSettings)
async def get_settings(scope: ReadScope, session: SessionDep) -> ProjectSessionSettings:
    """The project's session settings (capture, inject, excludes, budgets)."""
    intake.whole_project(scope)
    conf = await project_settings.settings_of(session, scope)
    return ProjectSessionSettings(**conf.as_dict())


@router.put("/sessions/settings", response_model=ProjectSessionSettings)
async def put_settings(
    body: ProjectSessionSettings, request: Request, scope: WriteScope, session: SessionDep
) -> ProjectSessionSettings:
    """Change the project's session settings; fields left out keep their
    values. Intake on other API processes sees the change within seconds."""
    intake.whole_project(scope)
    conf = await project_settings.update(session, scope, changes=body)
    key = (scope.tenant_id, scope.project_id)
    request.app.state.caches.session_settings.drop(lambda k: k == key)
    return ProjectSessionSettings(**conf.as_dict())


@router.get("/sessions/spend", response_model=SpendOut)
async def spend(scope: ReadScope, session: SessionDep, settings: SettingsDep) -> SpendOut:
    """Today's model calls and tokens for session compression, and the budget."""
    intake.whole_project(scope)
    return await service.spend_today(
        session, scope, server_budget=settings.session_llm_tokens_per_day
    )


@router.get("/sessions/{session_id}", response_model=SessionOut)
async def get_session(session_id: SessionId, scope: ReadScope, session: SessionDep) -> SessionOut:
    """One session: platform, cwd, times, counts, summary, opt-outs."""
    return await service.get_session(session, scope, session_id=session_id)


@router.patch("/sessions/{session_id}", response_model=SessionOut)
async def patch_session(
    session_id: SessionId, body: SessionPatch, scope: WriteScope, session: SessionDep
) -> SessionOut:
    """Turn capture or injection off (or on) for one session."""
    return await service.patch_session(
        session, scope, session_id=session_id, capture=body.capture, inject=body.inject
    )


@router.get("/sessions/{session_id}/timeline", response_model=Timeline)
async def timeline(
    session_id: SessionId,
    scope: ReadScope,
    session: SessionDep,
    limits: LimitsDep,
    kind: Annotated[str | None, Query(max_length=40)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    cursor: Annotated[str | None, Query(max_length=2000)] = None,
) -> Timeline:
    """A session's events, observations and checkpoints in order."""
    items, next_cursor = await service.timeline(
        session, scope, session_id=session_id, kind=kind, limit=limit, cursor=cursor, limits=limits
    )
    return Timeline(session_id=session_id, items=items, next_cursor=next_cursor)


@router.get("/sessions/{session_id}/checkpoints", response_model=CheckpointList)
async def checkpoints(
    session_id: SessionId, scope: ReadScope, session: SessionDep, limits: LimitsDep
) -> CheckpointList:
    """A session's checkpoints, oldest first."""
    items, _ = await service.timeline(
        session, scope, session_id=session_id, kind="checkpoint", limit=500, cursor=None,
        limits=limits,
    )  # fmt: skip
    return CheckpointList(
        checkpoints=[
            CheckpointOut(id=i.id, at=i.at, trigger=str(i.tags.get("trigger", "")), text=i.summary)
            for i in items
        ]
    )


@router.post("/sessions/{session_id}/checkpoint", status_code=202, response_model=SessionOut)
async def checkpoint(
    session_id: SessionId, body: CheckpointRequest, scope: WriteScope, session: SessionDep
) -> SessionOut:
    """Checkpoint the session now (the worker writes it; it shows on
    ``/checkpoints`` and as a ``checkpoint`` event)."""
    return await service.request_checkpoint(session, scope, session_id=session_id, note=body.note)


@router.get("/collections", response_model=CollectionList)
async def list_collections(scope: ReadScope, session: SessionDep) -> CollectionList:
    """The project's saved queries."""
    return CollectionList(collections=await collections.list_all(session, scope))


@router.put("/collections/{name}", response_model=CollectionOut)
async def put_collection(
    name: CollectionName, body: CollectionIn, scope: WriteScope, session: SessionDep
) -> CollectionOut:
    """Save (or replace) a named query: words, tags, since, limit."""
    return await collections.save(session, scope, name=name, data=body)


@router.delete("/collections/{name}", status_code=204)
async def delete_collection(name: CollectionName, scope: WriteScope, session: SessionDep) -> None:
    """Forget a saved query (the notes stay)."""
    await collections.delete(session, scope, name=name)


@router.get("/collections/{name}", response_model=CollectionRun)
async def run_collection(
    name: CollectionName,
    request: Request,
    scope: ReadScope,
    session: SessionDep,
    limits: LimitsDep,
) -> CollectionRun:
    """Run a saved query: its notes now."""
    items = await collections.run(
        session, scope, name=name, embedder=request.app.state.embedder,
        cache=request.app.state.query_cache, limits=limits,
    )  # fmt: skip
    return CollectionRun(name=name, items=items)


@router.get(
    "/collections/{name}/export",
    response_class=Response,
    responses={200: {"content": {"text/markdown": {}, "text/plain": {}, "application/json": {}}}},
)
async def export_collection(
    name: CollectionName,
    request: Request,
    scope: ReadScope,
    session: SessionDep,
    limits: LimitsDep,
    format: Annotated[Literal["markdown", "json", "text"], Query()] = "markdown",
) -> Response:
    """A saved query's notes as Markdown, JSON or plain text."""
    items = await collections.run(
        session, scope, name=name, embedder=request.app.state.embedder,
        cache=request.app.state.query_cache, limits=limits,
    )  # fmt: skip
    body, media = collections.export(name, items, format)
    return Response(content=body, media_type=media)
