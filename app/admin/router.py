"""Operator API: tenants and their keys. Guarded by KEEPMEM_ADMIN_TOKEN."""

from __future__ import annotations

import uuid

from app.auth import service as auth_service
from app.auth.schemas import (
    KeyCreate,
    KeyCreated,
    KeyList,
    KeyOut,
    TenantCreate,
    TenantCreated,
    TenantList,
    TenantOut,
)
from app.deps import SettingsDep, SystemSessionDep, server_secret
from app.tenants import service as tenants
from app.wire import api_router

router = api_router(prefix="/v1/admin", tags=["admin"])


@router.post("/tenants", response_model=TenantCreated, status_code=201, summary="Create a tenant")
async def create_tenant(
    body: TenantCreate, session: SystemSessionDep, settings: SettingsDep
) -> TenantCreated:
    """Create a tenant with its default project and a first key (read, write,
    admin). The key is in this response only."""
    new = await tenants.create_tenant(
        session, name=body.name, server_secret=server_secret(settings)
    )
    return TenantCreated(
        tenant=TenantOut.of(new.tenant),
        api_key=KeyCreated(**KeyOut.of(new.key.row).model_dump(), key=new.key.secret),
    )


@router.get("/tenants", response_model=TenantList, summary="List tenants")
async def list_tenants(session: SystemSessionDep) -> TenantList:
    """All tenants."""
    return TenantList(tenants=[TenantOut.of(t) for t in await tenants.list_tenants(session)])


@router.get("/tenants/{tenant_id}/keys", response_model=KeyList, summary="List a tenant's keys")
async def list_keys(tenant_id: uuid.UUID, session: SystemSessionDep) -> KeyList:
    """A tenant's keys (prefixes and metadata, never secrets)."""
    await tenants.get_tenant(session, tenant_id)
    rows = await auth_service.list_keys(session, tenant_id=tenant_id)
    return KeyList(keys=[KeyOut.of(r) for r in rows])


@router.post(
    "/tenants/{tenant_id}/keys",
    response_model=KeyCreated,
    status_code=201,
    summary="Create a key for a tenant",
)
async def create_key(
    tenant_id: uuid.UUID, body: KeyCreate, session: SystemSessionDep, settings: SettingsDep
) -> KeyCreated:
    """Create a key. The full key is in this response only."""
    await tenants.get_tenant(session, tenant_id)
    new = await auth_service.create_key(
        session,
        tenant_id=tenant_id,
        name=body.name,
        scopes=body.scopes,
        expires_at=body.expires_at,
        server_secret=server_secret(settings),
        actor="admin",
    )
    return KeyCreated(**KeyOut.of(new.row).model_dump(), key=new.secret)


@router.delete(
    "/tenants/{tenant_id}/keys/{key_id}", response_model=KeyOut, summary="Revoke a tenant's key"
)
async def revoke_key(tenant_id: uuid.UUID, key_id: uuid.UUID, session: SystemSessionDep) -> KeyOut:
    """Revoke a key; it stops working at once."""
    row = await auth_service.revoke_key(session, tenant_id=tenant_id, key_id=key_id, actor="admin")
    return KeyOut.of(row)
