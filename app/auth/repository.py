"""All SQL touching api_keys."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, select, text, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.models import ApiKey
from app.tenancy import TenantScope


@dataclass(frozen=True, slots=True)
class ResolvedKey:
    tenant_id: uuid.UUID
    key_id: uuid.UUID
    scopes: tuple[str, ...]
    expires_at: datetime | None
    revoked_at: datetime | None
    tenant_disabled: bool
    project_id: uuid.UUID | None = None
    tag_scope: tuple[str, ...] = ()
    parent_live: bool = True


async def resolve(session: AsyncSession, key_hash: bytes) -> ResolvedKey | None:
    """Look a key up by hash before any tenant is known (SECURITY DEFINER
    function): the one repository function that runs without a scope."""
    row = (
        await session.execute(
            text(
                "SELECT tenant_id, key_id, scopes, expires_at, revoked_at, tenant_disabled, "
                "project_id, tag_scope, parent_live "
                "FROM keepmem_resolve_api_key(:h)"
            ),
            {"h": key_hash},
        )
    ).first()
    if row is None:
        return None
    return ResolvedKey(
        tenant_id=row.tenant_id,
        key_id=row.key_id,
        scopes=tuple(row.scopes),
        expires_at=row.expires_at,
        revoked_at=row.revoked_at,
        tenant_disabled=row.tenant_disabled,
        project_id=row.project_id,
        tag_scope=tuple(row.tag_scope),
        parent_live=row.parent_live,
    )


async def touch(session: AsyncSession, scope: TenantScope) -> None:
    """Record the scope's key was used, at most once a minute per key, to keep reads cheap."""
    await session.execute(
        update(ApiKey)
        .where(
            ApiKey.tenant_id == scope.tenant_id,
            ApiKey.id == scope.key_id,
            (ApiKey.last_used_at.is_(None))
            | (ApiKey.last_used_at < text("now() - interval '60 seconds'")),
        )
        .values(last_used_at=text("now()"))
    )


async def insert_key(
    session: AsyncSession,
    tenant: TenantScope,
    *,
    name: str,
    prefix: str,
    key_hash: bytes,
    scopes: Sequence[str],
    expires_at: datetime | None,
    project_id: uuid.UUID | None = None,
    tag_scope: Sequence[str] = (),
    parent: str | None = None,
) -> ApiKey:
    row = ApiKey(
        tenant_id=tenant.tenant_id,
        name=name,
        prefix=prefix,
        key_hash=key_hash,
        scopes=list(scopes),
        expires_at=expires_at,
        project_id=project_id,
        tag_scope=list(tag_scope),
        parent=parent,
    )
    session.add(row)
    await session.flush()
    await session.refresh(row)
    return row


async def list_keys(session: AsyncSession, tenant: TenantScope) -> Sequence[ApiKey]:
    result = await session.execute(
        select(ApiKey).where(ApiKey.tenant_id == tenant.tenant_id).order_by(ApiKey.created_at)
    )
    return result.scalars().all()


async def revoke(session: AsyncSession, tenant: TenantScope, key_id: uuid.UUID) -> ApiKey | None:
    row = await session.scalar(
        update(ApiKey)
        .where(ApiKey.tenant_id == tenant.tenant_id, ApiKey.id == key_id)
        .values(revoked_at=text("coalesce(revoked_at, now())"))
        .returning(ApiKey)
    )
    return row


async def delete_keys_of_project(
    session: AsyncSession, tenant: TenantScope, project_id: uuid.UUID
) -> list[uuid.UUID]:
    """Erase the keys locked to a project (its erasure revokes them)."""
    rows = await session.scalars(
        delete(ApiKey)
        .where(ApiKey.tenant_id == tenant.tenant_id, ApiKey.project_id == project_id)
        .returning(ApiKey.id)
    )
    return list(rows)


async def key_ids(session: AsyncSession, tenant: TenantScope) -> list[uuid.UUID]:
    return list(
        await session.scalars(select(ApiKey.id).where(ApiKey.tenant_id == tenant.tenant_id))
    )
