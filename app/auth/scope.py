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
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

READ = "read"
WRITE = "write"
ADMIN = "admin"
ALL_SCOPES = (READ, WRITE, ADMIN)

_MINT = object()


@dataclass(frozen=True, slots=True, kw_only=True)
class TenantScope:
    """``credential`` names who acts ("key:<id>", "grant:<id>",
    "oidc:<issuer id>:<subject>", or "" for the system); ``key_id`` is set
    for an API key. A credential may be locked to one project
    (``project_lock``) and to a tag scope (``tag_terms``, casefolded
    ``key=value``): row-level security then shows it only notes carrying
    every term, and its writes are stamped with them."""

    tenant_id: uuid.UUID
    key_id: uuid.UUID | None = None
    credential: str = ""
    permissions: frozenset[str] = frozenset()
    project_lock: uuid.UUID | None = None
    tag_terms: tuple[str, ...] = ()
    expires_at: datetime | None = None
    _token: object = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._token is not _MINT:
            raise TypeError("scopes are minted by app.auth.scope only")

    @property
    def actor(self) -> str:
        return self.credential or "system"


@dataclass(frozen=True, slots=True, kw_only=True)
class Scope(TenantScope):
    project_id: uuid.UUID
    project_slug: str = ""


def mint_tenant(
    *,
    tenant_id: uuid.UUID,
    key_id: uuid.UUID | None,
    permissions: frozenset[str],
    credential: str = "",
    project_lock: uuid.UUID | None = None,
    tag_terms: Iterable[str] = (),
    expires_at: datetime | None = None,
) -> TenantScope:
    """A resolved credential's tenant, before its project is known."""
    return TenantScope(
        tenant_id=tenant_id,
        key_id=key_id,
        credential=credential or (f"key:{key_id}" if key_id else ""),
        permissions=permissions,
        project_lock=project_lock,
        tag_terms=tuple(sorted(set(tag_terms))),
        expires_at=expires_at,
        _token=_MINT,
    )


def mint(tenant: TenantScope, *, project_id: uuid.UUID, project_slug: str) -> Scope:
    """The request's scope: the credential's tenant and the project it works in."""
    if tenant.project_lock is not None and tenant.project_lock != project_id:
        raise ValueError("a project-locked credential cannot act in another project")
    return Scope(
        tenant_id=tenant.tenant_id,
        key_id=tenant.key_id,
        credential=tenant.credential,
        permissions=tenant.permissions,
        project_lock=tenant.project_lock,
        tag_terms=tenant.tag_terms,
        expires_at=tenant.expires_at,
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
