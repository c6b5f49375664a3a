"""FastAPI dependencies: the unit of work, the tenant scope, the admin guard.

The session dependency commits after the route returns and before the
response is sent, so a failed commit is a 5xx, never a false 2xx.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Annotated, Any
from urllib.parse import unquote

from fastapi import Depends, Header, Path, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.ext.asyncio import AsyncSession

from app import cors, ratelimit, replicas, tenancy
from app.accounts import service as accounts
from app.audit import http as audit
from app.auth import service as auth_service
from app.caches import KeyCache, RequestCaches
from app.db import Database, refusal
from app.errors import (
    AppError,
    Forbidden,
    MissingScope,
    NotConfigured,
    OutsideScope,
    QuotaExceeded,
    Unauthorized,
)
from app.kit.ids import MAX_ID_LENGTH, PROJECT_SLUG_PATTERN
from app.logs import log_failure
from app.oauth import resource, tokens
from app.oauth.keyring import Keyring
from app.request_vars import Journal, journal_var, tenant_var
from app.settings import Limits, Settings
from app.tenancy import ADMIN, READ, WRITE, Scope, TenantScope, mint
from app.tenants import service as tenants_service
from app.usage import service as usage

log = logging.getLogger("keepmem.api")


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


#: Routes a read replica may serve (app.replicas): finds, lists and gets.
#: Their incidental writes go through ``replicas.incidental``; anything else
#: they write sends them back to the primary.
REPLICA_READS = frozenset(
    {
        "search",
        "search_compact",
        "list_notes",
        "get_note",
        "list_versions",
        "list_parts",
        "timeline",
        "detail",
    }
)


async def unit_of_work(
    request: Request, db: Annotated[Database, Depends(get_db)]
) -> AsyncIterator[AsyncSession]:
    """The request's transaction; its audit entry is written in it, just
    before the commit (a refused write is recorded after the rollback).
    With read replicas, a find, list or get runs on one (app.replicas)."""
    journal = Journal()
    journal_var.set(journal)  # this request's task only: nothing to reset
    routing = replicas.routing_of(request.scope)
    read = getattr(request.scope.get("route"), "name", None) in REPLICA_READS
    replica = await routing.choose(read) if routing is not None else None
    async with (replica.db if replica is not None else db).sessions() as session:
        if replica is not None:
            replicas.on_replica(session)
        try:
            async with session.begin():
                yield session
                await audit.close_request(session, request, journal)
        except Exception as exc:
            if routing is not None and routing.give_up(exc, read=read):
                raise  # answered by the primary instead (app.replicas.ReplicaRouting)
            error = _refused_by_database(exc) or exc
            try:
                await audit.refused_request(db, request, error)
            except Exception as failure:  # noqa: BLE001 - the request's own error wins
                log_failure(log, "could not record a refused request in the audit log", failure)
            if error is not exc:
                raise error from exc
            raise
        if auth_service.ended_credentials(session):
            await forget_cached_keys(request)
        if routing is not None:
            await routing.finish(session, read=read, write=audit.is_write(request))


async def forget_cached_keys(request: Request) -> None:
    """A committed transaction ended credentials (a key revoked or erased):
    this process forgets the keys it cached at once, and a new revocation
    epoch in Redis makes every other process look its keys up again on
    their next use (``app.caches.KeyCache``)."""
    caches: RequestCaches = request.app.state.caches
    caches.keys.forget_all()
    epoch = await ratelimit.new_key_epoch(request.app.state.redis)
    if epoch is not None:
        caches.keys.epoch = epoch


def _refused_by_database(exc: Exception) -> AppError | None:
    """A write the database refused on purpose, as the 403 it stands for."""
    found = refusal(exc)
    if found is None:
        return None
    kind, message = found
    return OutsideScope(message) if kind == "scope" else QuotaExceeded(message)


# scope="function": the commit runs when the route returns, before the
# response is sent; a failed commit becomes a 5xx instead of a false 2xx.
SessionDep = Annotated[AsyncSession, Depends(unit_of_work, scope="function")]


api_key_scheme = HTTPBearer(
    auto_error=False,
    scheme_name="ApiKey",
    description="A tenant API key (km_...) or an OAuth 2.1 access token: keepmem's own "
    "(for this server: its aud names this server's URL or its /mcp), or a trusted "
    "issuer's; when several tenants trust that issuer and audience, name yours in the "
    "X-Keepmem-Tenant header (its tenant id).",
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


def token_verifier(request: Request, settings: Settings) -> tokens.Verifier | None:
    """How this request's access tokens are checked: keepmem's own must name
    this server (its public URL, else the URL the request reached) in ``aud``;
    ``X-Keepmem-Tenant`` names the tenant for an issuer several tenants trust."""
    keyring: Keyring | None = getattr(request.app.state, "keyring", None)
    if keyring is None:
        return None
    issuer = resource.issuer_of(settings.public_url, str(request.base_url))
    return tokens.Verifier.of(keyring, issuer, request.headers.get(tokens.TENANT_HEADER))


async def current_scope(
    request: Request,
    response: Response,
    session: SessionDep,
    settings: SettingsDep,
    credentials: Credentials,
    x_project: ProjectHeader = None,
) -> Scope:
    """Resolve the credential (API key or access token) and the project into
    the request's tenant scope."""
    caches: RequestCaches = request.app.state.caches
    credential = await _credential(request, session, settings, credentials, caches.keys)
    admission = await _admit(request, settings, credential)
    if admission.stale:
        # A credential ended since this key was cached (in some process), or
        # it was cached before this process learnt the epoch: forget every
        # key cached here and take the database's word for this one.
        caches.keys.forget_all(admission.epoch)
        credential = await _credential(
            request, session, settings, credentials, caches.keys, refresh=True
        )
        admission = await _admit(request, settings, credential)
    if admission.epoch is not None:
        caches.keys.epoch = admission.epoch
    tenant = credential.tenant
    tenant_var.set(str(tenant.tenant_id))  # this request's task only (log lines)
    if admission.quota is not None:
        response.headers.update(admission.quota.headers)
    # From here the unit of work is the credential's tenant's (row-level security).
    await tenancy.bind(session, tenant)
    if tenant.key_id is not None and caches.needs_touch(tenant.key_id):
        await replicas.incidental(session, tenant, lambda s: auth_service.record_use(s, tenant))
    await _daily_quotas(request, session, tenant, caches, admission.used_today)
    slug = await tenants_service.project_slug_for(
        session, tenant, forced=credential.project_slug, asked=x_project
    )
    project_id = caches.projects.get((tenant.tenant_id, slug))
    if project_id is None:
        project, created = await accounts.resolve_project_created(
            session,
            tenant,
            slug=slug,
            may_create=tenants_service.may_create_projects(tenant),
            max_projects=settings.max_projects_per_tenant,
        )
        project_id = project.id
        if not created:  # a project made in this request exists only if it commits
            caches.projects.put((tenant.tenant_id, slug), project_id)
    tenants_service.check_lock(tenant, project_id, slug)
    scope = mint(tenant, project_id=project_id, project_slug=slug)
    request.state.scope = scope  # for the request's audit entry
    # A page of another origin: refused here, before the route does anything,
    # unless the project allows that origin (app.cors).
    await cors.admit(session, scope, request.scope.setdefault("state", {}))
    return scope


async def _credential(
    request: Request,
    session: AsyncSession,
    settings: Settings,
    credentials: HTTPAuthorizationCredentials | None,
    keys: KeyCache[Any],
    *,
    refresh: bool = False,
) -> auth_service.Credential:
    """The presented credential, resolved (API keys through ``keys``, the
    key cache; ``refresh``: from the database); a failure is counted
    against the client's address (429 past the limit)."""
    try:
        return await auth_service.resolve_credential(
            session,
            presented=_bearer(credentials),
            server_secret=server_secret(settings),
            verifier=token_verifier(request, settings),
            cache=keys,
            cache_seconds=settings.key_cache_seconds,
            refresh=refresh,
        )
    except Unauthorized:
        await ratelimit.count_failure(
            request.app.state.redis,
            address=request.client.host if request.client else "unknown",
            failures_per_minute=settings.auth_failures_per_minute,
        )
        raise


async def _admit(
    request: Request, settings: Settings, credential: auth_service.Credential
) -> ratelimit.Admission:
    """The request's one Redis round trip: the key's rate limit (429), the
    tenant's count of the day, whether a cached key is still current."""
    tenant = credential.tenant
    return await ratelimit.admit(
        request.app.state.redis,
        key_id=tenant.key_id or tenant.credential,
        tenant_id=tenant.tenant_id,
        limit_per_minute=settings.rate_limit_per_minute,
        cached_epoch=credential.cached_epoch,
    )


async def _daily_quotas(
    request: Request,
    session: AsyncSession,
    tenant: TenantScope,
    caches: RequestCaches,
    used_today: int | None,
) -> None:
    """Refuse the request past a daily quota (it was counted by ``_admit``)."""
    limits = caches.quotas.get(tenant.tenant_id)
    if limits is None:
        limits = await usage.daily_limits(session, tenant)
        caches.quotas.put(tenant.tenant_id, limits)
    requests, jobs = limits
    ratelimit.check_day(used_today, limit=requests)
    if jobs is not None and audit.is_write(request):
        await usage.check_jobs(session, tenant, limit=jobs)


def require(permission: str) -> Callable[..., Coroutine[Any, Any, Scope]]:
    async def dependency(scope: Annotated[Scope, Depends(current_scope)]) -> Scope:
        if permission not in scope.permissions:
            raise MissingScope(f"this credential lacks the '{permission}' scope")
        if permission == ADMIN and (scope.project_lock is not None or scope.tag_terms):
            # Tenant administration sees past any project or tag scope.
            raise MissingScope(
                "tenant administration needs an admin credential without a project or tag scope"
            )
        return scope

    return dependency


ReadScope = Annotated[Scope, Depends(require(READ))]
WriteScope = Annotated[Scope, Depends(require(WRITE))]
AdminScope = Annotated[Scope, Depends(require(ADMIN))]
AnyScope = Annotated[Scope, Depends(current_scope)]


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
    _: Annotated[None, Depends(admin_guard)],
    request: Request,
    db: Annotated[Database, Depends(get_db)],
) -> AsyncIterator[AsyncSession]:
    async with db.sessions() as session:
        async with session.begin():
            await tenancy.bind_system(session)
            yield session
        if auth_service.ended_credentials(session):
            await forget_cached_keys(request)


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
