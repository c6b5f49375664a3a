"""The tenant scope every repository call takes.

A ``Scope`` can be minted only here: by the API's auth dependency (through
``mint``) after a key resolved, and by the worker from a job's own ids
(``scope_for_job``). Everything else receives one and passes it on.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

READ = "read"
WRITE = "write"
ADMIN = "admin"
ALL_SCOPES = (READ, WRITE, ADMIN)

_MINT = object()


@dataclass(frozen=True, slots=True)
class Scope:
    tenant_id: uuid.UUID
    project_id: uuid.UUID
    project_slug: str
    key_id: uuid.UUID | None = None
    permissions: frozenset[str] = frozenset()
    _token: object = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._token is not _MINT:
            raise TypeError("Scope is minted by app.auth only")

    @property
    def actor(self) -> str:
        return f"key:{self.key_id}" if self.key_id else "system"


def mint(
    *,
    tenant_id: uuid.UUID,
    project_id: uuid.UUID,
    project_slug: str,
    key_id: uuid.UUID | None,
    permissions: frozenset[str],
) -> Scope:
    return Scope(tenant_id, project_id, project_slug, key_id, permissions, _MINT)


def scope_for_job(tenant_id: uuid.UUID, project_id: uuid.UUID, project_slug: str = "") -> Scope:
    """A scope for background work, rebuilt from the ids a job carries."""
    return Scope(tenant_id, project_id, project_slug, None, frozenset(ALL_SCOPES), _MINT)
