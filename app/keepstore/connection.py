"""The backend's connection: ``backend_params`` from keep.toml, the
database (as keepmem's application role, never the owner), and the scope of
the API key for each collection, re-checked every minute so a revoked or
expired key stops working in a running keep too."""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession

from app import tenancy
from app.accounts import service as accounts
from app.db import Database, role_sees_every_tenant
from app.keepstore.bridge import Bridge
from app.kit.ids import InvalidId, validate_project_slug
from app.settings import Settings
from app.tenancy import WRITE, Scope

T = TypeVar("T")
DOC_COLLECTION = "default"  # keep's document collection (always this name)
RECHECK_SECONDS = 60.0
# the service's default project limit (this process has no service settings)
MAX_PROJECTS: int | None = Settings.model_fields["max_projects_per_tenant"].default

# backend_params key -> the environment variable read when it is absent
PARAMS = {
    "database_url": "KEEPMEM_DATABASE_URL",
    "api_key": "KEEPMEM_API_KEY",
    "secret_key": "KEEPMEM_SECRET_KEY",
    "project": "KEEPMEM_PROJECT",
}


class BackendConfigError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Params:
    database_url: str
    api_key: str
    secret_key: str
    project: str | None = None
    pool_size: int = 4

    @classmethod
    def read(cls, raw: Mapping[str, Any], env: Mapping[str, str] | None = None) -> Params:
        env = os.environ if env is None else env
        values = {k: raw.get(k) or env.get(var) for k, var in PARAMS.items()}
        missing = [k for k in ("database_url", "api_key", "secret_key") if not values[k]]
        if missing:
            names = ", ".join(f"{k} (or {PARAMS[k]})" for k in missing)
            raise BackendConfigError(f"keepmem backend: [store.backend_params] needs {names}")
        unknown = sorted(set(raw) - set(PARAMS) - {"pool_size"})
        if unknown:
            raise BackendConfigError(f"keepmem backend: unknown backend_params {unknown}")
        project = values["project"]
        if project is not None:
            try:
                validate_project_slug(str(project))
            except InvalidId as exc:
                raise BackendConfigError(f"keepmem backend: project: {exc}") from exc
        try:
            pool_size = int(raw.get("pool_size", 4))
        except (TypeError, ValueError) as exc:
            raise BackendConfigError("keepmem backend: pool_size must be a whole number") from exc
        if not 1 <= pool_size <= 100:
            raise BackendConfigError("keepmem backend: pool_size must be between 1 and 100")
        return cls(
            database_url=str(values["database_url"]),
            api_key=str(values["api_key"]),
            secret_key=str(values["secret_key"]),
            project=str(project) if project else None,
            pool_size=pool_size,
        )


class Connection:
    """What both stores share: one loop thread, one engine, the key's scopes."""

    def __init__(self, params: Params) -> None:
        self.params = params
        self.bridge = Bridge()
        self.db = Database(params.database_url, pool_size=params.pool_size, max_overflow=2)
        self._scopes: dict[str, tuple[Scope, float]] = {}
        self._users = 2  # the document and the vector store; closed by the last
        try:
            self.bridge.call(self._check_role())
            # the key and the project now, so a bad one fails keep's start-up
            self.bridge.call(self._scope(DOC_COLLECTION))
        except BaseException:
            self.bridge.close(self.db.dispose)
            raise

    async def _check_role(self) -> None:
        async with self.db.transaction() as session:
            if await role_sees_every_tenant(session):
                raise BackendConfigError(
                    "keepmem backend: database_url must log in as keepmem's application "
                    "role, not the owner or a superuser (row-level security must apply)"
                )

    def project_of(self, collection: str) -> str | None:
        """keep's document collection is the configured project (or the
        key's own); any other collection name is a project of that name."""
        if collection == DOC_COLLECTION:
            return self.params.project
        try:
            validate_project_slug(collection)
        except InvalidId as exc:
            raise ValueError(f"collection {collection!r} cannot name a project: {exc}") from exc
        return collection

    async def _scope(self, collection: str) -> Scope:
        cached = self._scopes.get(collection)
        now = time.monotonic()
        if cached is not None and now - cached[1] < RECHECK_SECONDS:
            return cached[0]
        async with self.db.transaction() as session:
            scope = await accounts.scope_for_key(
                session,
                presented=self.params.api_key,
                server_secret=self.params.secret_key,
                slug=self.project_of(collection),
                max_projects=MAX_PROJECTS,
            )
        self._scopes[collection] = (scope, now)
        return scope

    def run(
        self,
        collection: str,
        work: Callable[[AsyncSession, Scope], Awaitable[T]],
        *,
        write: bool = False,
    ) -> T:
        """``work(session, scope)`` in one transaction of the key's tenant and
        the collection's project (committed when it returns). A ``write``
        needs the key's 'write' scope, as the REST API's writes do."""

        async def unit() -> T:
            scope = await self._scope(collection)
            if write and WRITE not in scope.permissions:
                raise PermissionError(
                    "keepmem backend: this API key lacks the 'write' scope (read-only key)"
                )
            async with tenancy.transaction(self.db, scope) as session:
                return await work(session, scope)

        return self.bridge.call(unit())

    def release(self) -> None:
        self._users -= 1
        if self._users <= 0:
            self.bridge.close(self.db.dispose)
