"""FastAPI dependencies: the unit of work, the tenant scope, the admin guard.

The session dependency commits after the route returns and before the
response is sent, so a failed commit is a 5xx, never a false 2xx.
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Annotated, Any
from urllib.parse import unquote

from fastapi import Depends, Header, Path, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.ext.asyncio import AsyncSession

from app import ratelimit, tenancy
from app.auth import service as auth_service
from app.auth.scope import ADMIN, READ, WRITE, Scope, mint
from app.caches import RequestCaches
from app.db import Database
from app.errors import Forbidden, MissingScope, NotConfigured, Unauthorized
from app.notes.ids import MAX_ID_LENGTH, PROJECT_SLUG_PATTERN
from app.settings import Limits, Settings
from app.tenants import service as tenants_service
from app.tenants.service import DEFAULT_PROJECT


def get_settings_dep(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_db(request: Request) -> Database:
    db: Database = request.app.state.db
    return db


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]


def get_limits(settings: SettingsDep) -> Limits:
    return settings.limits


LimitsDep = Annotated[Limits, Depends(get_limits)]


async def unit_of_work(db: Annotated[Database, Depends(get_db)]) -> AsyncIterator[AsyncSession]:
    async with db.sessions() as session, session.begin():
        yield session


# scope="function": the commit runs when the route returns, before the
# response is sent; a failed commit becomes a 5xx instead of a false 2xx.
SessionDep = Annotated[AsyncSession, Depends(unit_of_work, scope="function")]


api_key_scheme = HTTPBearer(
    auto_error=False, scheme_name="ApiKey", description="A tenant API key (km_...)."
)
admin_scheme = HTTPBearer(
    auto_error=False, scheme_name="AdminToken", description="The operator's KEEPMEM_ADMIN_TOKEN."
)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(api_key_scheme)]
AdminCredentials = Annotated[HTTPAuthorizationCredentials | None, Depends(admin_scheme)]


def _bearer(credentials: HTTPAuthorizationCredentials | None) -> str:
    if credentials is None or not credentials.credentials.strip():
        raise Unauthorized("missing credentials: send 'Authorization: Bearer <key>'")
    return credentials.credentials.strip()


ProjectHeader = Annotated[
    str | None,
    Header(
        description="Project slug inside the tenant: 2-63 characters of a-z, 0-9 and '-', "
        "starting with a letter. Created on first use by a key with the 'write' scope.",
        # Stated for the document; checked by the tenants service, whose 400
        # names the slug rule (keep's client shows that message).
        json_schema_extra={"pattern": PROJECT_SLUG_PATTERN, "minLength": 2, "maxLength": 63},
    ),
]


def server_secret(settings: Settings) -> str:
    if settings.secret_key is None:
        raise NotConfigured("server secret is not configured (KEEPMEM_SECRET_KEY)")
    return settings.secret_key.get_secret_value()


async def current_scope(
    request: Request,
    response: Response,
    session: SessionDep,
    settings: SettingsDep,
    credentials: Credentials,
    x_project: ProjectHeader = None,
) -> Scope:
    """Resolve the API key and the project into the request's tenant scope."""
    redis = request.app.state.redis
    address = request.client.host if request.client else "unknown"
    failures = settings.auth_failures_per_minute
    try:
        resolved = await auth_service.authenticate(
            session, presented=_bearer(credentials), server_secret=server_secret(settings)
        )
    except Unauthorized:
        await ratelimit.count_failure(redis, address=address, failures_per_minute=failures)
        raise
    quota = await ratelimit.check(
        redis, key_id=resolved.key_id, limit_per_minute=settings.rate_limit_per_minute
    )
    if quota is not None:
        response.headers.update(quota.headers)
    # From here the unit of work is the key's tenant's (row-level security).
    tenant = auth_service.tenant_of(resolved)
    await tenancy.bind(session, tenant)
    caches: RequestCaches = request.app.state.caches
    if caches.needs_touch(resolved.key_id):
        await auth_service.record_use(session, tenant)
    # Absent: the default project. Present but empty is a client bug, not a
    # request for the default (keep sends the header only when configured).
    slug = DEFAULT_PROJECT if x_project is None else x_project.strip()
    project_id = caches.projects.get((resolved.tenant_id, slug))
    if project_id is None:
        project, created = await tenants_service.resolve_project_created(
            session,
            tenant,
            slug=slug,
            may_create=WRITE in tenant.permissions or ADMIN in tenant.permissions,
            max_projects=settings.max_projects_per_tenant,
        )
        project_id = project.id
        if not created:  # a project made in this request exists only if it commits
            caches.projects.put((resolved.tenant_id, slug), project_id)
    return mint(tenant, project_id=project_id, project_slug=slug)


def require(permission: str) -> Callable[..., Coroutine[Any, Any, Scope]]:
    async def dependency(scope: Annotated[Scope, Depends(current_scope)]) -> Scope:
        if permission not in scope.permissions:
            raise MissingScope(f"this API key lacks the '{permission}' scope")
        return scope

    return dependency


ReadScope = Annotated[Scope, Depends(require(READ))]
WriteScope = Annotated[Scope, Depends(require(WRITE))]
AdminScope = Annotated[Scope, Depends(require(ADMIN))]


# A percent-encoded id: up to three characters per character, and a selector.
NOTE_PATH_MAX = 3 * MAX_ID_LENGTH + 32


def note_id_path(
    note_id: Annotated[
        str,
        Path(
            description="Note id, percent-encoded as one path segment "
            "(e.g. `file%3A%2F%2F%2Ftmp%2Fa.md`, `%2532142b0dd147`). "
            "`ID@V{N}` addresses a version, `ID@P{N}` a part. "
            f"At most {MAX_ID_LENGTH} characters once decoded.",
            min_length=1,
            max_length=NOTE_PATH_MAX,
        ),
    ],
) -> str:
    # The raw-path middleware leaves %2F encoded so ids may contain '/'.
    return unquote(note_id)


NoteIdDep = Annotated[str, Depends(note_id_path)]


async def admin_guard(
    settings: SettingsDep,
    credentials: AdminCredentials,
) -> None:
    if settings.admin_token is None:
        raise NotConfigured("the admin API is disabled: set KEEPMEM_ADMIN_TOKEN")
    presented = _bearer(credentials)
    if not hmac.compare_digest(
        presented.encode(), settings.admin_token.get_secret_value().encode()
    ):
        raise Unauthorized("invalid admin credential")


async def system_unit_of_work(
    _: Annotated[None, Depends(admin_guard)], db: Annotated[Database, Depends(get_db)]
) -> AsyncIterator[AsyncSession]:
    async with db.sessions() as session, session.begin():
        await tenancy.bind_system(session)
        yield session


SystemSessionDep = Annotated[AsyncSession, Depends(system_unit_of_work, scope="function")]


async def optional_scope(
    request: Request,
    response: Response,
    session: SessionDep,
    settings: SettingsDep,
    credentials: Credentials,
    x_project: ProjectHeader = None,
) -> Scope | None:
    """The caller's scope when a valid key is sent, else None (public routes)."""
    if credentials is None:
        return None
    try:
        return await current_scope(request, response, session, settings, credentials, x_project)
    except (Unauthorized, Forbidden):
        return None


OptionalScope = Annotated[Scope | None, Depends(optional_scope)]
