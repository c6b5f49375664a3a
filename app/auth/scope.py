"""The scopes every repository call takes.

``TenantScope`` is a tenant as a resolved credential sees it (no project
yet); ``Scope`` adds the project. Both can be minted only here, by the API's
auth dependency (``mint_tenant`` then ``mint``, after a key resolved), by
tenant administration for a project it just made (``scope_for_project``) and
by the worker from a job's own ids (``tenant_for_jobs``, ``scope_for_job``).
Everything else receives one and passes it on; ``app.tenancy`` binds one to
a transaction for row-level security.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

READ = "read"
WRITE = "write"
ADMIN = "admin"
ALL_SCOPES = (READ, WRITE, ADMIN)

_MINT = object()


@dataclass(frozen=True, slots=True, kw_only=True)
class TenantScope:
    tenant_id: uuid.UUID
    key_id: uuid.UUID | None = None
    permissions: frozenset[str] = frozenset()
    _token: object = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._token is not _MINT:
            raise TypeError("scopes are minted by app.auth.scope only")

    @property
    def actor(self) -> str:
        return f"key:{self.key_id}" if self.key_id else "system"


@dataclass(frozen=True, slots=True, kw_only=True)
class Scope(TenantScope):
    project_id: uuid.UUID
    project_slug: str = ""


def mint_tenant(
    *, tenant_id: uuid.UUID, key_id: uuid.UUID | None, permissions: frozenset[str]
) -> TenantScope:
    """A resolved key's tenant, before its project is known."""
    return TenantScope(tenant_id=tenant_id, key_id=key_id, permissions=permissions, _token=_MINT)


def mint(tenant: TenantScope, *, project_id: uuid.UUID, project_slug: str) -> Scope:
    """The request's scope: the key's tenant and the project it works in."""
    return Scope(
        tenant_id=tenant.tenant_id,
        key_id=tenant.key_id,
        permissions=tenant.permissions,
        project_id=project_id,
        project_slug=project_slug,
        _token=_MINT,
    )


def _system_tenant(tenant_id: uuid.UUID) -> TenantScope:
    return TenantScope(tenant_id=tenant_id, permissions=frozenset(ALL_SCOPES), _token=_MINT)


def _system_scope(tenant_id: uuid.UUID, project_id: uuid.UUID, project_slug: str) -> Scope:
    tenant = _system_tenant(tenant_id)
    return mint(tenant, project_id=project_id, project_slug=project_slug)


def scope_for_project(tenant_id: uuid.UUID, project_id: uuid.UUID, project_slug: str) -> Scope:
    """Full rights on a project, for the administration that created it."""
    return _system_scope(tenant_id, project_id, project_slug)


def tenant_for_admin(tenant_id: uuid.UUID) -> TenantScope:
    """A tenant as tenant administration (admin API, CLI) acts on it."""
    return _system_tenant(tenant_id)


def tenant_for_jobs(tenant_id: uuid.UUID) -> TenantScope:
    """The tenant a batch of jobs belongs to (claiming them, before their projects)."""
    return _system_tenant(tenant_id)


def scope_for_job(tenant_id: uuid.UUID, project_id: uuid.UUID, project_slug: str = "") -> Scope:
    """A scope for background work, rebuilt from the ids a job carries."""
    return _system_scope(tenant_id, project_id, project_slug)
