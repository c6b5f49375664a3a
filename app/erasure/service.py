"""Erasure: a project or a whole tenant, every row of it in every table
(notes, versions, parts, vectors, edges, entities, jobs, feed, blobs, terms,
usage), its credentials revoked (keys and OAuth grants, codes and service
accounts locked to it are deleted) and its audit trail dropped, leaving one
audit entry that records the erasure: who, when, how much; no content."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from app.audit import repository as audit_log
from app.audit import service as audit
from app.auth import service as keys
from app.errors import BadRequest
from app.oauth import service as oauth
from app.tenancy import Scope, tenant_for_admin
from app.tenants import service as tenants
from app.usage import service as usage


async def erase_project(session: AsyncSession, scope: Scope, *, slug: str) -> uuid.UUID:
    """Erase one of the caller's tenant's projects; returns its id."""
    project = await tenants.get_project(session, scope, slug=slug)
    if scope.project_lock is not None or scope.tag_terms:
        raise BadRequest("a restricted credential cannot erase a project")
    revoked = await keys.erase_keys_of_project(session, scope, project_id=project.id)
    await oauth.erase_project(session, scope, project_id=project.id)
    await audit.erase(session, scope, project_id=project.id)
    notes = await tenants.delete_project(session, scope, project_id=project.id)
    await audit_log.record(
        session,
        scope,
        actor=scope.actor,
        action="project.erase",
        target=slug,
        project_id=project.id,
        detail={"notes": notes, "keys_revoked": len(revoked)},
    )
    return project.id


@dataclass(frozen=True, slots=True)
class ErasedTenant:
    tenant_id: uuid.UUID
    key_ids: list[uuid.UUID]  # for the caller to clear what Redis holds of them


async def erase_tenant(session: AsyncSession, tenant_id: uuid.UUID, *, actor: str) -> ErasedTenant:
    """Erase a tenant (operator: a system transaction)."""
    await tenants.get_tenant(session, tenant_id)
    tenant = tenant_for_admin(tenant_id)
    key_ids = await keys.key_ids(session, tenant)
    notes, stored = await usage.stored(session, tenant)
    await audit.erase(session, tenant)
    await tenants.delete_tenant(session, tenant)
    await audit_log.record(
        session,
        tenant,
        actor=actor,
        action="tenant.erase",
        target=str(tenant_id),
        detail={"notes": notes, "bytes": stored, "keys_revoked": len(key_ids)},
    )
    return ErasedTenant(tenant_id=tenant_id, key_ids=key_ids)
