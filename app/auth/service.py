"""API keys: authenticate, create (shown once), list, revoke."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession

from app.audit import repository as audit
from app.auth import repository as repo
from app.auth.keys import generate_key, hash_key, looks_like_key
from app.caches import KeyCache
from app.errors import BadRequest, Forbidden, KeyNotFound, Unauthorized
from app.kit import tags as tagrules
from app.kit.timeutil import utcnow
from app.models import ApiKey
from app.oauth import tokens
from app.tenancy import ALL_SCOPES, Scope, TenantScope, mint_tenant, tenant_for_admin

MAX_KEY_NAME = 200


@dataclass(slots=True)
class NewKey:
    row: ApiKey
    secret: str  # the full key, returned exactly once


async def authenticate(
    session: AsyncSession,
    *,
    presented: str,
    server_secret: str,
    cache: KeyCache[repo.ResolvedKey] | None = None,
    cache_seconds: float = 0.0,
    refresh: bool = False,
) -> tuple[repo.ResolvedKey, str | None]:
    """Resolve a presented key; any failure is the same 401 to the caller.

    Returns the key and, when it came from ``cache``, the revocation epoch it
    was cached under (None: looked up in the database just now, as always
    with ``refresh``). Only keys accepted here are cached, and the checks
    run again on every use, so an expiry takes effect on time."""
    if not looks_like_key(presented):
        raise Unauthorized("invalid API key")
    key_hash = hash_key(server_secret, presented)
    if cache is None or cache_seconds <= 0:
        cache = None
    elif not refresh:
        hit = cache.get(key_hash, cache_seconds)
        if hit is not None:
            try:
                _check(hit[0])
            except Unauthorized:
                cache.forget(key_hash)
                raise
            return hit
    epoch = cache.epoch if cache is not None else None  # read before the lookup (KeyCache)
    resolved = await repo.resolve(session, key_hash)
    if resolved is None:
        raise Unauthorized("invalid API key")
    _check(resolved)
    if cache is not None and epoch is not None:
        cache.put(key_hash, resolved, epoch)
    return resolved, None


def _check(resolved: repo.ResolvedKey) -> None:
    problem = None
    if resolved.revoked_at is not None:
        problem = "API key revoked"
    elif resolved.expires_at is not None and resolved.expires_at <= utcnow():
        problem = "API key expired"
    elif resolved.tenant_disabled:
        problem = "tenant disabled"
    elif not resolved.parent_live:
        problem = "API key revoked: the credential it was narrowed from is revoked or expired"
    if problem is not None:
        raise Unauthorized(
            problem, refused=None if resolved.tenant_disabled else tenant_of(resolved)
        )


def tenant_of(resolved: repo.ResolvedKey) -> TenantScope:
    """The tenant scope a resolved key grants."""
    return mint_tenant(
        tenant_id=resolved.tenant_id,
        key_id=resolved.key_id,
        permissions=frozenset(resolved.scopes),
        project_lock=resolved.project_id,
        tag_terms=resolved.tag_scope,
        expires_at=resolved.expires_at,
    )


def oauth_client_tenant(tenant_id: uuid.UUID, client_id: str) -> TenantScope:
    """The tenant as an OAuth client acts on it at the token endpoint (for
    the audit trail of tokens issued and revoked; it grants nothing)."""
    return mint_tenant(
        tenant_id=tenant_id, key_id=None, credential=f"client:{client_id}", permissions=frozenset()
    )


@dataclass(frozen=True, slots=True)
class Credential:
    """A presented credential, resolved: its tenant scope, and for a token
    from an external issuer the project its claims name. ``cached_epoch``:
    for an API key taken from the key cache, the revocation epoch it was
    cached under (the caller checks it is still Redis's, see ``KeyCache``)."""

    tenant: TenantScope
    project_slug: str | None = None
    cached_epoch: str | None = None


async def resolve_credential(
    session: AsyncSession,
    *,
    presented: str,
    server_secret: str,
    verifier: tokens.Verifier | None,
    cache: KeyCache[repo.ResolvedKey] | None = None,
    cache_seconds: float = 0.0,
    refresh: bool = False,
) -> Credential:
    """An API key or an OAuth access token (keepmem's or a trusted
    issuer's, checked by ``verifier``: signature, expiry, audience),
    resolved to the same kind of scope; any failure is a 401. API keys are
    remembered in ``cache`` for ``cache_seconds`` (0: not at all);
    ``refresh`` looks the key up in the database even when it is cached."""
    if tokens.looks_like_jwt(presented):
        if verifier is None:
            raise Unauthorized("access tokens are not accepted here")
        tenant, slug = await tokens.authenticate(session, presented, verifier)
        return Credential(tenant=tenant, project_slug=slug)
    resolved, epoch = await authenticate(
        session,
        presented=presented,
        server_secret=server_secret,
        cache=cache,
        cache_seconds=cache_seconds,
        refresh=refresh,
    )
    return Credential(tenant=tenant_of(resolved), cached_epoch=epoch)


#: ``session.info`` flag: this transaction ends credentials (a key revoked
#: or erased, a tenant's keys erased). After its commit the API forgets the
#: keys it cached and changes the revocation epoch, so every process looks
#: its keys up again (``app.deps``).
ENDS_CREDENTIALS = "keepmem.ends_credentials"


def _ends_credentials(session: AsyncSession) -> None:
    session.info[ENDS_CREDENTIALS] = True


def ended_credentials(session: AsyncSession) -> bool:
    """Whether the session's transaction ended credentials (and clears the flag)."""
    return bool(session.info.pop(ENDS_CREDENTIALS, False))


async def record_use(session: AsyncSession, scope: TenantScope) -> None:
    await repo.touch(session, scope)


def _check_scopes(scopes: Sequence[str]) -> list[str]:
    cleaned = sorted(set(scopes))
    if not cleaned or any(s not in ALL_SCOPES for s in cleaned):
        raise BadRequest(f"scopes must be a non-empty subset of {list(ALL_SCOPES)}")
    return cleaned


async def create_key(
    session: AsyncSession,
    *,
    tenant_id: uuid.UUID,
    name: str,
    scopes: Sequence[str],
    expires_at: datetime | None,
    server_secret: str,
    actor: str,
) -> NewKey:
    name = name.strip()
    if not name or len(name) > MAX_KEY_NAME:
        raise BadRequest(f"key name must be 1-{MAX_KEY_NAME} characters")
    if expires_at is not None and expires_at <= utcnow():
        raise BadRequest("expires_at must be in the future")
    secret, prefix = generate_key()
    tenant = tenant_for_admin(tenant_id)
    row = await repo.insert_key(
        session,
        tenant,
        name=name,
        prefix=prefix,
        key_hash=hash_key(server_secret, secret),
        scopes=_check_scopes(scopes),
        expires_at=expires_at,
    )
    await audit.record(
        session,
        tenant,
        actor=actor,
        action="key.create",
        target=str(row.id),
        detail={"name": name, "scopes": row.scopes},
    )
    return NewKey(row=row, secret=secret)


MAX_NARROW_SECONDS = 90 * 86400


async def narrow_key(
    session: AsyncSession,
    scope: Scope,
    *,
    name: str,
    scopes: Sequence[str] | None,
    tags: Mapping[str, str],
    expires_in_seconds: int,
    server_secret: str,
) -> NewKey:
    """A key narrower than the caller's credential, for handing to a
    sub-agent: locked to the request's project, a subset of the caller's
    scopes, the caller's tag scope plus ``tags``, and an expiry no later than
    the caller's. It dies with the credential it was minted from."""
    name = name.strip()
    if not name or len(name) > MAX_KEY_NAME:
        raise BadRequest(f"key name must be 1-{MAX_KEY_NAME} characters")
    wanted = _check_scopes(scopes if scopes is not None else sorted(scope.permissions))
    wider = [s for s in wanted if s not in scope.permissions]
    if wider:
        raise Forbidden(f"a credential cannot grant scopes it lacks: {wider}")
    try:
        terms = sorted({*scope.tag_terms, *tagrules.scope_terms(tags)})
    except tagrules.InvalidTags as exc:
        raise BadRequest(str(exc)) from exc
    if not 0 < expires_in_seconds <= MAX_NARROW_SECONDS:
        raise BadRequest(f"expires_in_seconds must be 1-{MAX_NARROW_SECONDS}")
    expires_at = utcnow() + timedelta(seconds=expires_in_seconds)
    if scope.expires_at is not None:
        expires_at = min(expires_at, scope.expires_at)
    if not scope.credential:
        raise Forbidden("only a credential can mint a narrower one")
    secret, prefix = generate_key()
    row = await repo.insert_key(
        session,
        scope,
        name=name,
        prefix=prefix,
        key_hash=hash_key(server_secret, secret),
        scopes=wanted,
        expires_at=expires_at,
        project_id=scope.project_id,
        tag_scope=terms,
        parent=scope.credential,
    )
    await audit.record(
        session,
        scope,
        actor=scope.actor,
        action="key.narrow",
        target=str(row.id),
        detail={"name": name, "scopes": wanted, "project": scope.project_slug, "tags": terms},
    )
    return NewKey(row=row, secret=secret)


async def list_keys(session: AsyncSession, *, tenant_id: uuid.UUID) -> Sequence[ApiKey]:
    return await repo.list_keys(session, tenant_for_admin(tenant_id))


async def revoke_key(
    session: AsyncSession, *, tenant_id: uuid.UUID, key_id: uuid.UUID, actor: str
) -> ApiKey:
    tenant = tenant_for_admin(tenant_id)
    row = await repo.revoke(session, tenant, key_id)
    if row is None:
        raise KeyNotFound(f"key not found: {key_id}")
    _ends_credentials(session)  # and those narrowed from it
    await audit.record(session, tenant, actor=actor, action="key.revoke", target=str(key_id))
    return row


async def erase_keys_of_project(
    session: AsyncSession, tenant: TenantScope, *, project_id: uuid.UUID
) -> list[uuid.UUID]:
    """Erase the keys locked to a project (its erasure revokes them); their ids."""
    _ends_credentials(session)
    return await repo.delete_keys_of_project(session, tenant, project_id)


async def key_ids(session: AsyncSession, tenant: TenantScope) -> list[uuid.UUID]:
    """Every key id of the tenant, for its erasure (which clears what Redis
    holds of them): the tenant's keys end with this transaction."""
    _ends_credentials(session)
    return await repo.key_ids(session, tenant)
