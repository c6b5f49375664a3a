"""All SQL touching the OAuth tables: signing keys, clients, codes, grants
and trusted external issuers.

The token, revocation, introspection and registration endpoints run before
a tenant is known, in a transaction bound with ``tenancy.bind_oauth``; the
tenant's own administration of clients and issuers runs under its scope.
A presented access token is resolved through ``keepmem_resolve_grant`` (a
SECURITY DEFINER function), like an API key.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, exists, or_, select, text, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.models import OAuthClient, OAuthCode, OAuthGrant, OAuthIssuer, OAuthKey
from app.tenancy import TenantScope

# -- signing keys (no tenant) -------------------------------------------------------


async def signing_keys(session: AsyncSession, *, retired_within_s: int) -> Sequence[OAuthKey]:
    """Keys that sign (not retired) or may still verify (retired recently), newest first."""
    return (
        await session.scalars(
            select(OAuthKey)
            .where(
                or_(
                    OAuthKey.retired_at.is_(None),
                    OAuthKey.retired_at > text("now() - make_interval(secs => :s)"),
                )
            )
            .params(s=retired_within_s)
            .order_by(OAuthKey.created_at.desc())
        )
    ).all()


async def insert_key(
    session: AsyncSession, *, kid: str, private_key: bytes, public_jwk: dict[str, Any]
) -> None:
    session.add(OAuthKey(kid=kid, private_key=private_key, public_jwk=public_jwk))
    await session.flush()


async def retire_keys_except(session: AsyncSession, kid: str) -> int:
    result = await session.execute(
        update(OAuthKey)
        .where(OAuthKey.kid != kid, OAuthKey.retired_at.is_(None))
        .values(retired_at=text("now()"))
    )
    return int(getattr(result, "rowcount", 0) or 0)


# -- clients ------------------------------------------------------------------------


async def get_client(session: AsyncSession, client_id: str) -> OAuthClient | None:
    return await session.get(OAuthClient, client_id)


async def insert_client(session: AsyncSession, row: OAuthClient) -> OAuthClient:
    session.add(row)
    await session.flush()
    return row


async def mark_client_used(session: AsyncSession, client_id: str) -> None:
    """The client completed a grant: it is no longer pruned as unused."""
    await session.execute(
        update(OAuthClient)
        .where(OAuthClient.client_id == client_id, OAuthClient.used_at.is_(None))
        .values(used_at=text("now()"))
    )


async def prune_unused_clients(session: AsyncSession, keep: int) -> None:
    """Delete the registered (tenantless) clients that never completed a
    grant, but the newest ``keep`` and any holding an authorization code."""
    unused = (
        select(OAuthClient.client_id)
        .where(
            OAuthClient.tenant_id.is_(None),
            OAuthClient.used_at.is_(None),
            ~exists().where(OAuthCode.client_id == OAuthClient.client_id),
        )
        .order_by(OAuthClient.created_at.desc(), OAuthClient.client_id.desc())
        .offset(max(0, keep))
    )
    await session.execute(delete(OAuthClient).where(OAuthClient.client_id.in_(unused)))


async def list_clients(session: AsyncSession, tenant: TenantScope) -> Sequence[OAuthClient]:
    return (
        await session.scalars(
            select(OAuthClient)
            .where(OAuthClient.tenant_id == tenant.tenant_id)
            .order_by(OAuthClient.created_at)
        )
    ).all()


async def revoke_client(
    session: AsyncSession, tenant: TenantScope, client_id: str
) -> OAuthClient | None:
    return await session.scalar(
        update(OAuthClient)
        .where(OAuthClient.tenant_id == tenant.tenant_id, OAuthClient.client_id == client_id)
        .values(revoked_at=text("coalesce(revoked_at, now())"))
        .returning(OAuthClient)
    )


# -- authorization codes ------------------------------------------------------------


async def insert_code(session: AsyncSession, row: OAuthCode) -> None:
    session.add(row)
    await session.flush()


async def take_code(session: AsyncSession, code_hash: bytes, client_id: str) -> OAuthCode | None:
    """Consume a code (one use): it is deleted whether or not it is still valid."""
    return await session.scalar(
        delete(OAuthCode)
        .where(OAuthCode.code_hash == code_hash, OAuthCode.client_id == client_id)
        .returning(OAuthCode)
    )


async def drop_expired_codes(session: AsyncSession) -> None:
    await session.execute(delete(OAuthCode).where(OAuthCode.expires_at < text("now()")))


# -- grants -------------------------------------------------------------------------


async def insert_grant(session: AsyncSession, row: OAuthGrant) -> None:
    session.add(row)
    await session.flush()


async def grant_by_refresh(session: AsyncSession, refresh_hash: bytes) -> OAuthGrant | None:
    return await session.scalar(select(OAuthGrant).where(OAuthGrant.refresh_hash == refresh_hash))


async def get_grant(session: AsyncSession, grant_id: uuid.UUID) -> OAuthGrant | None:
    return await session.get(OAuthGrant, grant_id)


async def rotate_refresh(
    session: AsyncSession,
    grant_id: uuid.UUID,
    *,
    refresh_hash: bytes | None,
    refresh_expires_at: datetime | None,
    access_expires_at: datetime,
) -> None:
    await session.execute(
        update(OAuthGrant)
        .where(OAuthGrant.id == grant_id)
        .values(
            refresh_hash=refresh_hash,
            refresh_expires_at=refresh_expires_at,
            access_expires_at=access_expires_at,
        )
    )


async def revoke_grant(session: AsyncSession, grant_id: uuid.UUID) -> None:
    await session.execute(
        update(OAuthGrant)
        .where(OAuthGrant.id == grant_id)
        .values(revoked_at=text("coalesce(revoked_at, now())"), refresh_hash=None)
    )


@dataclass(frozen=True, slots=True)
class ResolvedGrant:
    tenant_id: uuid.UUID
    client_id: str
    key_id: uuid.UUID | None
    scopes: tuple[str, ...]
    project_id: uuid.UUID
    tag_scope: tuple[str, ...]
    revoked: bool
    tenant_disabled: bool


async def resolve_grant(session: AsyncSession, grant_id: uuid.UUID) -> ResolvedGrant | None:
    """An access token's grant, before any tenant is known (SECURITY DEFINER)."""
    row = (
        await session.execute(
            text(
                "SELECT tenant_id, client_id, key_id, scopes, project_id, tag_scope, revoked, "
                "tenant_disabled FROM keepmem_resolve_grant(:g)"
            ),
            {"g": grant_id},
        )
    ).first()
    if row is None:
        return None
    return ResolvedGrant(
        tenant_id=row.tenant_id,
        client_id=row.client_id,
        key_id=row.key_id,
        scopes=tuple(row.scopes),
        project_id=row.project_id,
        tag_scope=tuple(row.tag_scope),
        revoked=row.revoked,
        tenant_disabled=row.tenant_disabled,
    )


# -- external issuers ---------------------------------------------------------------


async def insert_issuer(session: AsyncSession, row: OAuthIssuer) -> OAuthIssuer:
    session.add(row)
    await session.flush()
    await session.refresh(row)
    return row


async def list_issuers(session: AsyncSession, tenant: TenantScope) -> Sequence[OAuthIssuer]:
    return (
        await session.scalars(
            select(OAuthIssuer)
            .where(OAuthIssuer.tenant_id == tenant.tenant_id)
            .order_by(OAuthIssuer.created_at)
        )
    ).all()


async def delete_issuer(session: AsyncSession, tenant: TenantScope, issuer_id: uuid.UUID) -> bool:
    result = await session.execute(
        delete(OAuthIssuer)
        .where(OAuthIssuer.tenant_id == tenant.tenant_id, OAuthIssuer.id == issuer_id)
        .returning(OAuthIssuer.id)
    )
    return result.first() is not None


async def resolve_issuers(
    session: AsyncSession, issuer: str, audiences: Sequence[str]
) -> Sequence[OAuthIssuer]:
    """Every tenant's trust of this issuer for one of these audiences,
    oldest first (SECURITY DEFINER: before any tenant is known)."""
    return (
        await session.scalars(
            select(OAuthIssuer).from_statement(
                text(
                    "SELECT * FROM keepmem_resolve_issuer(:i, :a) ORDER BY created_at, id"
                ).bindparams(i=issuer, a=list(audiences))
            )
        )
    ).all()


async def delete_of_project(
    session: AsyncSession, tenant: TenantScope, project_id: uuid.UUID
) -> None:
    """Erase the grants, codes and service accounts of a project."""
    for model in (OAuthGrant, OAuthCode, OAuthClient):
        await session.execute(
            delete(model).where(model.tenant_id == tenant.tenant_id, model.project_id == project_id)
        )
