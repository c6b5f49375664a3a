"""API keys: authenticate, create (shown once), list, revoke."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession

from app.audit import repository as audit
from app.auth import repository as repo
from app.auth.keys import generate_key, hash_key, looks_like_key
from app.auth.scope import ALL_SCOPES, TenantScope, mint_tenant, tenant_for_admin
from app.errors import BadRequest, KeyNotFound, Unauthorized
from app.models import ApiKey
from app.timeutil import utcnow

MAX_KEY_NAME = 200


@dataclass(slots=True)
class NewKey:
    row: ApiKey
    secret: str  # the full key, returned exactly once


async def authenticate(
    session: AsyncSession, *, presented: str, server_secret: str
) -> repo.ResolvedKey:
    """Resolve a presented key; any failure is the same 401 to the caller."""
    if not looks_like_key(presented):
        raise Unauthorized("invalid API key")
    resolved = await repo.resolve(session, hash_key(server_secret, presented))
    if resolved is None:
        raise Unauthorized("invalid API key")
    problem = None
    if resolved.revoked_at is not None:
        problem = "API key revoked"
    elif resolved.expires_at is not None and resolved.expires_at <= utcnow():
        problem = "API key expired"
    elif resolved.tenant_disabled:
        problem = "tenant disabled"
    if problem is not None:
        raise Unauthorized(problem)
    return resolved


def tenant_of(resolved: repo.ResolvedKey) -> TenantScope:
    """The tenant scope a resolved key grants."""
    return mint_tenant(
        tenant_id=resolved.tenant_id,
        key_id=resolved.key_id,
        permissions=frozenset(resolved.scopes),
    )


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


async def list_keys(session: AsyncSession, *, tenant_id: uuid.UUID) -> Sequence[ApiKey]:
    return await repo.list_keys(session, tenant_for_admin(tenant_id))


async def revoke_key(
    session: AsyncSession, *, tenant_id: uuid.UUID, key_id: uuid.UUID, actor: str
) -> ApiKey:
    tenant = tenant_for_admin(tenant_id)
    row = await repo.revoke(session, tenant, key_id)
    if row is None:
        raise KeyNotFound(f"key not found: {key_id}")
    await audit.record(session, tenant, actor=actor, action="key.revoke", target=str(key_id))
    return row
