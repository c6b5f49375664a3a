"""mem0's hosted API under ``/mem0`` (the client's ``host`` is
``https://<keepmem>/mem0``): mem0's own paths, trailing slashes included.
They live under a prefix of their own because mem0 reuses names keepmem
already serves with another meaning (``/v1/entities/``, ``/v1/memories/``).

Authentication is a keepmem API key, sent as mem0's client sends it
(``Authorization: Token <key>``) or as everywhere else in keepmem
(``Bearer <key>``); ``X-Project`` picks the project. How mem0's
parameters map onto keepmem's memories: ``app.mem0compat.service``.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import Depends, Path, Query, Request, Response
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials

from app.deps import LimitsDep, ProjectHeader, SessionDep, SettingsDep, current_scope
from app.errors import MethodNotAllowed, MissingScope, NotOffered
from app.mem0compat import entities, service
from app.mem0compat.schemas import (
    AddIn,
    AddOut,
    BatchDeleteIn,
    BatchUpdateIn,
    GetAllIn,
    HistoryOut,
    Mem0EntityList,
    Mem0Memory,
    Mem0MessageOut,
    PageOut,
    PingOut,
    SearchIn,
    SearchOut,
    UpdateIn,
)
from app.tenancy import READ, WRITE, Scope
from app.wire import MAX_OFFSET, api_router

router = api_router(prefix="/mem0", tags=["mem0"])

token_scheme = APIKeyHeader(
    name="Authorization",
    auto_error=False,
    scheme_name="Mem0Token",
    description="A keepmem API key as mem0's client sends it, `Token <key>`, "
    "or `Bearer <key>` (under /mem0 only).",
)


def _credentials(header: str | None) -> HTTPAuthorizationCredentials | None:
    """``Token <key>`` or ``Bearer <key>``, as the keepmem credential it carries."""
    scheme, _, key = (header or "").strip().partition(" ")
    if scheme.lower() not in ("token", "bearer") or not key.strip():
        return None
    return HTTPAuthorizationCredentials(scheme="Bearer", credentials=key.strip())


def _scope(permission: str) -> Callable[..., Coroutine[Any, Any, Scope]]:
    async def dependency(
        request: Request,
        response: Response,
        session: SessionDep,
        settings: SettingsDep,
        authorization: Annotated[str | None, Depends(token_scheme)],
        x_project: ProjectHeader = None,
    ) -> Scope:
        scope = await current_scope(
            request, response, session, settings, _credentials(authorization), x_project
        )
        if permission not in scope.permissions:
            raise MissingScope(f"this credential lacks the '{permission}' scope")
        return scope

    return dependency


Read = Annotated[Scope, Depends(_scope(READ))]
Write = Annotated[Scope, Depends(_scope(WRITE))]
MemoryId = Annotated[
    str,
    Path(
        min_length=1,
        max_length=300,
        description="keepmem's memory id (`mem/<hex>`, percent-encoded as mem0's client "
        "sends it; the bare `<hex>` too).",
    ),
]
Owner = Annotated[str | None, Query(min_length=1, max_length=200)]


@router.get("/v1/ping/", response_model=PingOut, summary="mem0: check the key")
async def ping(scope: Read) -> PingOut:
    """What mem0's client reads when it starts: the key is valid; ``org_id``
    is the key's tenant, ``project_id`` the project (``X-Project``)."""
    return PingOut(
        status="ok",
        message="API key is valid",
        org_id=str(scope.tenant_id),
        project_id=scope.project_slug,
    )


@router.post("/v3/memories/add/", response_model=AddOut, summary="mem0: add memories")
async def add(
    body: AddIn, request: Request, scope: Write, session: SessionDep, limits: LimitsDep
) -> AddOut:
    """Add messages for a user / agent / app / run: with ``infer: false``
    each message is a memory, verbatim; else keepmem's memory formation
    reads them (queued: ``PENDING``)."""
    return await service.add(
        session,
        scope,
        body=body,
        limits=limits,
        embedder=request.app.state.embedder,
        cache=request.app.state.query_cache,
    )


@router.post("/v3/memories/", response_model=PageOut, summary="mem0: list memories")
async def get_all(
    request: Request,
    scope: Read,
    session: SessionDep,
    body: GetAllIn | None = None,
    page: Annotated[int, Query(ge=1, le=MAX_OFFSET)] = 1,
    page_size: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> PageOut:
    """Memories matching mem0's filters, newest first, a page at a time."""
    return await service.get_all(
        session, scope, body=body or GetAllIn(), page=page, page_size=page_size,
        url=str(request.url),
    )  # fmt: skip


@router.post("/v3/memories/search/", response_model=SearchOut, summary="mem0: search memories")
async def search(body: SearchIn, request: Request, scope: Read, session: SessionDep) -> SearchOut:
    """keepmem's find over memories, with mem0's filters, ``top_k`` and ``threshold``."""
    return await service.search(
        session,
        scope,
        body=body,
        embedder=request.app.state.embedder,
        cache=request.app.state.query_cache,
    )


@router.delete("/v1/memories/", response_model=Mem0MessageOut, summary="mem0: delete all memories")
async def delete_all(
    scope: Write,
    session: SessionDep,
    user_id: Owner = None,
    agent_id: Owner = None,
    app_id: Owner = None,
    run_id: Owner = None,
) -> Mem0MessageOut:
    """Delete every memory of the user, agent, app and / or run named (one at least)."""
    owners = {"user_id": user_id, "agent_id": agent_id, "app_id": app_id, "run_id": run_id}
    n = await service.delete_all(session, scope, owners=owners)
    return Mem0MessageOut(message=f"Memories deleted successfully! ({n})")


@router.get(
    "/v1/memories/{memory_id:path}/history/",
    response_model=list[HistoryOut],
    summary="mem0: a memory's history",
)
async def memory_history(memory_id: MemoryId, scope: Read, session: SessionDep) -> list[HistoryOut]:
    """The memory's wordings, oldest first (keepmem's versions): ADD, then UPDATEs."""
    return await service.history_of(session, scope, memory_id)


@router.api_route(
    "/v1/memories/{memory_id:path}/history/",
    methods=["POST", "PUT", "PATCH", "DELETE"],
    include_in_schema=False,
)
async def history_is_read_only(memory_id: str) -> None:
    """A history is only read: without this route the ``{memory_id:path}``
    routes below would take ``.../history/`` for a memory id."""
    raise MethodNotAllowed("method not allowed", headers={"Allow": "GET"})


@router.get("/v1/memories/{memory_id:path}/", response_model=Mem0Memory, summary="mem0: a memory")
async def get_memory(memory_id: MemoryId, scope: Read, session: SessionDep) -> Mem0Memory:
    """One memory."""
    return service.out(await service.held(session, scope, memory_id))


@router.put(
    "/v1/memories/{memory_id:path}/", response_model=Mem0Memory, summary="mem0: update a memory"
)
async def update_memory(
    memory_id: MemoryId, body: UpdateIn, scope: Write, session: SessionDep, limits: LimitsDep
) -> Mem0Memory:
    """New text (a new version of the memory) and / or metadata (``{}`` clears it)."""
    return await service.update(session, scope, memory_id, body=body, limits=limits)


@router.delete(
    "/v1/memories/{memory_id:path}/", response_model=Mem0MessageOut, summary="mem0: delete a memory"
)
async def delete_memory(
    memory_id: MemoryId,
    scope: Write,
    session: SessionDep,
    delete_linked: Annotated[
        bool, Query(description="Also the memories this one superseded, and theirs.")
    ] = False,
) -> Mem0MessageOut:
    """Delete one memory (with its versions)."""
    await service.delete(session, scope, memory_id, linked=delete_linked)
    return Mem0MessageOut(message="Memory deleted successfully!")


@router.get("/v1/entities/", response_model=Mem0EntityList, summary="mem0: users, agents, runs")
async def list_entities(scope: Read, session: SessionDep) -> Mem0EntityList:
    """Every user, agent, app and run that holds current memories, with their counts."""
    return await entities.entities(session, scope)


@router.delete(
    "/v2/entities/{entity_type}/{name:path}/",
    response_model=Mem0MessageOut,
    summary="mem0: delete a user, agent, app or run",
)
async def delete_entity(
    entity_type: Annotated[str, Path(pattern="^(user|agent|app|run)$")],
    name: Annotated[str, Path(min_length=1, max_length=200)],
    scope: Write,
    session: SessionDep,
) -> Mem0MessageOut:
    """Forget an entity: its memories, and a user's, agent's or run's threads."""
    await entities.forget(session, scope, kind=entity_type, name=name)
    return Mem0MessageOut(message="Entity deleted successfully.")


@router.put("/v1/batch/", response_model=Mem0MessageOut, summary="mem0: update memories")
async def batch_update(
    body: BatchUpdateIn, scope: Write, session: SessionDep, limits: LimitsDep
) -> Mem0MessageOut:
    """Update up to 1,000 memories, all or none."""
    n = await service.batch_update(session, scope, items=body.memories, limits=limits)
    return Mem0MessageOut(message=f"Successfully updated {n} memories")


@router.delete("/v1/batch/", response_model=Mem0MessageOut, summary="mem0: delete memories")
async def batch_delete(body: BatchDeleteIn, scope: Write, session: SessionDep) -> Mem0MessageOut:
    """Delete up to 1,000 memories, all or none."""
    n = await service.batch_delete(session, scope, items=body.memories)
    return Mem0MessageOut(message=f"Successfully deleted {n} memories")


# -- what mem0's client can call that keepmem does not offer: a 501 that says so ------

# mem0's path, the methods its client uses, the feature, and keepmem's nearest
# equivalent (outside /mem0) where there is one.
NOT_OFFERED: list[tuple[str, list[str], str, str]] = [
    ("/v1/exports/", ["POST"], "memory exports", "GET /v1/export streams a project as NDJSON"),
    ("/v1/exports/get/", ["POST"], "memory exports", "GET /v1/export streams a project as NDJSON"),
    ("/v1/summary/", ["POST"], "memory summaries", ""),
    ("/v1/feedback/", ["POST"], "feedback on memories", ""),
    ("/v2/entities/{kind}/{name}/profile/", ["GET", "POST"], "user profiles", ""),
    ("/v2/profiles/{rest:path}", ["GET", "POST"], "user profiles", ""),
    (
        "/api/v1/orgs/{rest:path}",
        ["GET", "PATCH", "PUT"],
        "project settings (instructions, categories)",
        "GET and PATCH /v1/settings hold a project's settings",
    ),
    (
        "/api/v1/webhooks/{rest:path}",
        ["GET", "POST", "PUT", "DELETE"],
        "mem0's webhooks",
        "/v1/webhooks registers keepmem's webhooks",
    ),
]


def _not_offered(feature: str, instead: str) -> Callable[..., Coroutine[Any, Any, None]]:
    async def refuse(scope: Read) -> None:
        message = f"keepmem's mem0 API does not offer {feature}"
        message += f" ({instead})" if instead else ""
        raise NotOffered(message, detail=message)

    return refuse


for _path, _methods, _feature, _instead in NOT_OFFERED:
    router.add_api_route(
        _path, _not_offered(_feature, _instead), methods=_methods, include_in_schema=False
    )
