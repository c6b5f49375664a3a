"""Tenant self-service key management (keys with the ``admin`` scope)."""

from __future__ import annotations

import uuid

from app.auth import service
from app.auth.schemas import KeyCreate, KeyCreated, KeyList, KeyNarrow, KeyOut, WhoAmI
from app.deps import AdminScope, AnyScope, SessionDep, SettingsDep, server_secret
from app.wire import api_router

router = api_router(prefix="/v1/keys", tags=["keys"])
# Not under /v1/keys: any credential may use it, and it is not key administration.
subkeys = api_router(prefix="/v1/subkeys", tags=["keys"])
whoami = api_router(prefix="/v1", tags=["keys"])


@whoami.get("/whoami", response_model=WhoAmI, summary="The credential and project in use")
async def who_am_i(scope: AnyScope) -> WhoAmI:
    """What the request's credential is: its tenant, scopes, project (from
    `X-Project`, its lock, or the default), tag scope and expiry. For
    clients (the dashboard) that adapt to what a key may do."""
    return WhoAmI.of(scope)


@router.get("", response_model=KeyList, summary="List this tenant's keys")
async def list_keys(scope: AdminScope, session: SessionDep) -> KeyList:
    """Every key of the caller's tenant (never the secrets)."""
    rows = await service.list_keys(session, tenant_id=scope.tenant_id)
    return KeyList(keys=[KeyOut.of(r) for r in rows])


@router.post("", response_model=KeyCreated, status_code=201, summary="Create a key")
async def create_key(
    body: KeyCreate, scope: AdminScope, session: SessionDep, settings: SettingsDep
) -> KeyCreated:
    """Create a key for the caller's tenant. The full key is in this response only."""
    new = await service.create_key(
        session,
        tenant_id=scope.tenant_id,
        name=body.name,
        scopes=body.scopes,
        expires_at=body.expires_at,
        server_secret=server_secret(settings),
        actor=scope.actor,
    )
    return KeyCreated(**KeyOut.of(new.row).model_dump(), key=new.secret)


@router.delete("/{key_id}", response_model=KeyOut, summary="Revoke a key")
async def revoke_key(key_id: uuid.UUID, scope: AdminScope, session: SessionDep) -> KeyOut:
    """Revoke a key of the caller's tenant; it stops working at once."""
    row = await service.revoke_key(
        session, tenant_id=scope.tenant_id, key_id=key_id, actor=scope.actor
    )
    return KeyOut.of(row)


@subkeys.post("", response_model=KeyCreated, status_code=201, summary="Mint a narrower key")
async def narrow_key(
    body: KeyNarrow, scope: AnyScope, session: SessionDep, settings: SettingsDep
) -> KeyCreated:
    """Any credential can mint a key narrower than itself for a sub-agent:
    this request's project only, a subset of its scopes, its tag scope plus
    ``tags``, and an expiry. Revoking (or the expiry of) the credential it
    came from ends it. The full key is in this response only."""
    new = await service.narrow_key(
        session,
        scope,
        name=body.name,
        scopes=body.scopes,
        tags=body.tags,
        expires_in_seconds=body.expires_in_seconds,
        server_secret=server_secret(settings),
    )
    return KeyCreated(**KeyOut.of(new.row).model_dump(), key=new.secret)
