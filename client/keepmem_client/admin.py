"""Operators' client for ``/v1/admin``: tenants and their keys, with the
server's admin token (``KEEPMEM_ADMIN_TOKEN``)."""

from __future__ import annotations

import builtins
import os
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from keepmem_client import _models as m
from keepmem_client._base import Call
from keepmem_client._client import SyncBase


def _key(body: Any) -> m.Key:
    return m.Key.model_validate(body)


class Admin(SyncBase):
    """Tenants and keys, as the operator.

    with Admin(token="kma_...") as admin:
        made = admin.create_tenant("acme")        # the tenant and its first key
        admin.create_key(made.tenant.id, name="ci", scopes=["read", "write"])
    """

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        timeout: float | None = None,
        max_retries: int | None = None,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        token = token if token is not None else os.environ.get("KEEPMEM_ADMIN_TOKEN")
        super().__init__(
            base_url,
            token or "",
            project="",
            timeout=timeout,
            max_retries=max_retries,
            headers=headers,
            transport=transport,
        )

    def create_tenant(self, name: str) -> m.NewTenant:
        """A tenant with its default project and a first key (shown once)."""
        return self._run(
            Call("POST", "/v1/admin/tenants", m.NewTenant.model_validate, json={"name": name})
        )

    def tenants(self) -> builtins.list[m.Tenant]:
        def read(body: Any) -> builtins.list[m.Tenant]:
            return [m.Tenant.model_validate(t) for t in body["tenants"]]

        return self._run(Call("GET", "/v1/admin/tenants", read, idempotent=True))

    def create_key(
        self,
        tenant_id: str,
        *,
        name: str,
        scopes: Sequence[str] = ("read", "write"),
        expires_at: str | None = None,
    ) -> m.Key:
        body: dict[str, Any] = {"name": name, "scopes": list(scopes)}
        if expires_at:
            body["expires_at"] = expires_at
        return self._run(Call("POST", f"/v1/admin/tenants/{tenant_id}/keys", _key, json=body))

    def keys(self, tenant_id: str) -> builtins.list[m.Key]:
        def read(body: Any) -> builtins.list[m.Key]:
            return [m.Key.model_validate(k) for k in body["keys"]]

        path = f"/v1/admin/tenants/{tenant_id}/keys"
        return self._run(Call("GET", path, read, idempotent=True))

    def revoke_key(self, tenant_id: str, key_id: str) -> m.Key:
        return self._run(Call("DELETE", f"/v1/admin/tenants/{tenant_id}/keys/{key_id}", _key))
