"""Tenant self-service key management (keys with the ``admin`` scope)."""

from __future__ import annotations

import uuid

from app.auth import service
from app.auth.schemas import KeyCreate, KeyCreated, KeyList, KeyOut
from app.deps import AdminScope, SessionDep, SettingsDep, server_secret
from app.wire import api_router

router = api_router(prefix="/v1/keys", tags=["keys"])


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
