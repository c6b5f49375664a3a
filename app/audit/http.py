"""The audit trail of requests: each write records who (the credential:
key, OAuth grant or external subject), what (the operation), which notes or
object, when, the request id and the outcome, in the same transaction as the
change; never content. A refused write is recorded after its rollback, in a
transaction of its own, as is a refused credential whose tenant is known."""

from __future__ import annotations

from fastapi import Request
from sqlalchemy.ext.asyncio import AsyncSession

from app import tenancy
from app.audit import repository as repo
from app.db import Database
from app.errors import AppError
from app.request_vars import Journal
from app.tenancy import Scope, TenantScope

# POST routes that only read.
READS = frozenset({"search", "search_compact", "flow"})
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
SHOWN_NOTES = 50


def _operation(request: Request) -> tuple[str, str]:
    route = request.scope.get("route")
    return getattr(route, "name", request.method.lower()), getattr(route, "path", "")


def is_write(request: Request) -> bool:
    """A request that writes (POST routes that only read excepted)."""
    return request.method in WRITES and _operation(request)[0] not in READS


async def close_request(session: AsyncSession, request: Request, journal: Journal) -> None:
    """Before the request's commit: its entry, unless a service wrote its own
    (and no note changed besides)."""
    scope: Scope | None = getattr(request.state, "scope", None)
    if scope is None or not (journal.notes or (is_write(request) and not journal.recorded)):
        return
    name, path = _operation(request)
    notes = list(dict.fromkeys(journal.notes))
    await repo.record(
        session,
        scope,
        actor=scope.actor,
        action=f"api.{name}",
        target=notes[0] if len(notes) == 1 else None,
        detail={
            "method": request.method,
            "route": path,
            "notes": notes[:SHOWN_NOTES],
            "notes_changed": len(notes),
        },
    )


async def refused_request(db: Database, request: Request, exc: BaseException) -> None:
    """After a rollback: a write that failed, or a credential refused whose
    tenant is known (a revoked or expired key), in a transaction of its own."""
    scope: TenantScope | None = getattr(request.state, "scope", None)
    refused: TenantScope | None = getattr(exc, "refused", None)
    if refused is not None:
        scope, action = refused, "auth.refused"
    elif scope is not None and is_write(request):
        action = f"api.{_operation(request)[0]}"
    else:
        return
    code = exc.code if isinstance(exc, AppError) else "internal_error"
    status = exc.status_code if isinstance(exc, AppError) else 500
    async with tenancy.transaction(db, scope) as session:
        await repo.record(
            session,
            scope,
            actor=scope.actor,
            action=action,
            detail={"method": request.method, "route": _operation(request)[1], "status": status},
            outcome=f"error:{code}",
        )
