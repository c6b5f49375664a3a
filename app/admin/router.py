"""Operator API: tenants and their keys. Guarded by KEEPMEM_ADMIN_TOKEN."""

from __future__ import annotations

import uuid

from fastapi import Request, Response

from app import ratelimit
from app.accounts import service as accounts
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
from app.erasure import service as erasure
from app.tenants import service as tenants
from app.usage.schemas import QuotaChanges, Usage
from app.wire import api_router

router = api_router(prefix="/v1/admin", tags=["admin"])


@router.post("/tenants", response_model=TenantCreated, status_code=201, summary="Create a tenant")
async def create_tenant(
    body: TenantCreate, session: SystemSessionDep, settings: SettingsDep
) -> TenantCreated:
    """Create a tenant with its default project and a first key (read, write,
    admin). The key is in this response only."""
    new = await accounts.create_tenant(
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


@router.delete("/tenants/{tenant_id}", status_code=204, summary="Erase a tenant")
async def erase_tenant(
    tenant_id: uuid.UUID, request: Request, session: SystemSessionDep
) -> Response:
    """Erase a tenant: every row of it in every table, its keys and tokens
    with it; one audit entry (without content) records the erasure."""
    erased = await erasure.erase_tenant(session, tenant_id, actor="admin")
    await ratelimit.forget_tenant(request.app.state.redis, tenant_id, erased.key_ids)
    request.app.state.caches.projects.drop(lambda key: key[0] == tenant_id)
    return Response(status_code=204)


@router.put("/tenants/{tenant_id}/quotas", response_model=Usage, summary="Set a tenant's quotas")
async def set_quotas(
    tenant_id: uuid.UUID, body: QuotaChanges, request: Request, session: SystemSessionDep
) -> Usage:
    """Limits on notes, stored bytes, requests per day and background jobs per
    day. Only the quotas in the body change: a number sets that limit (0
    allows nothing: no more notes, or no requests until it is raised), `null`
    makes it unlimited, and a quota left out keeps its value. Past one,
    writes get 403 (429 for a daily quota) naming it; nothing is half-written."""
    await tenants.set_quotas(session, tenant_id, body.changes(), actor="admin")
    request.app.state.caches.quotas.drop(lambda key: key == tenant_id)
    return Usage(**await accounts.usage_of(session, tenant_id, request.app.state.redis))


@router.get("/tenants/{tenant_id}/usage", response_model=Usage, summary="A tenant's usage")
async def tenant_usage(tenant_id: uuid.UUID, request: Request, session: SystemSessionDep) -> Usage:
    """What the tenant holds and did today, and its quotas."""
    return Usage(**await accounts.usage_of(session, tenant_id, request.app.state.redis))
