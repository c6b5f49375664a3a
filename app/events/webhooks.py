"""Webhooks: a project's changes POSTed to a subscriber, signed.

A webhook names a URL, the kinds and tags of events it wants, and a secret.
The fan-out (in the worker's dispatcher loop) hands each webhook's new
changes to the job outbox as deliveries, in the transaction that moves its
cursor, so every change is offered once however often workers restart. A
delivery is a job: POSTed through the fetch rules (no private addresses
unless the operator allows them), retried with the outbox's backoff, and
dead-lettered where ``GET /v1/webhooks/{id}/deliveries`` and ``/v1/jobs``
show it, to be retried by hand.

Signature (``Keepmem-Signature: t=<unix seconds>,v1=<hex>``): HMAC-SHA256
with the webhook's secret over ``"<t>." + body``. Receivers recompute it,
compare in constant time, and refuse a ``t`` older than a few minutes.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app import sealing
from app.errors import BadRequest, Conflict, NotFound
from app.events import repository as repo
from app.events import service as events
from app.jobs import repository as jobs
from app.jobs.kinds import JobKind
from app.kit import cursors
from app.kit.fetch import FetchPolicy, FetchRefused, check, post
from app.models import Job, Webhook
from app.notes.repository import changes as feed
from app.tenancy import Scope

PURPOSE = "keepmem-webhook-secrets"  # the sealing key's label (app.sealing)
SIGNATURE_HEADER = "Keepmem-Signature"
MAX_PER_PROJECT = 10
EVENTS_PER_DELIVERY = 100
SECRET_PREFIX = "whsec_"


def signature(secret: str, body: bytes, *, at: int | None = None) -> str:
    """The ``Keepmem-Signature`` header value for ``body`` sent at ``at``."""
    t = int(time.time()) if at is None else at
    mac = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


def verify(secret: str, body: bytes, header: str, *, tolerance_s: int = 300) -> bool:
    """Whether ``header`` signs ``body`` with ``secret`` within the tolerance
    (what a receiver does; keepmem's tests use it)."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        t = int(fields.get("t", ""))
    except ValueError:
        return False
    if abs(time.time() - t) > tolerance_s:
        return False
    expected = signature(secret, body, at=t).split("v1=", 1)[1]
    return hmac.compare_digest(expected, fields.get("v1", ""))


def _terms_tags(tags: Mapping[str, Any]) -> dict[str, str]:
    return {k: v for k, v in tags.items() if isinstance(v, str)}


def watch_of(hook: Webhook) -> events.Watch:
    return events.watch_of(hook.kinds, _terms_tags(hook.tags))


async def _checked_url(url: str, policy: FetchPolicy) -> str:
    try:
        await check(url, policy)
    except FetchRefused as exc:
        raise BadRequest(f"webhook url refused: {exc}") from exc
    return url


async def create(
    session: AsyncSession,
    scope: Scope,
    *,
    url: str,
    kinds: list[str],
    tags: dict[str, str],
    description: str,
    secret: str | None,
    server_secret: str,
    policy: FetchPolicy,
) -> tuple[Webhook, str]:
    """A new webhook (and its secret, shown this once). It receives the
    changes made from now on."""
    watch = events.watch_of(kinds, tags)
    await _checked_url(url, policy)
    if await repo.count(session, scope) >= MAX_PER_PROJECT:
        raise Conflict(f"a project has at most {MAX_PER_PROJECT} webhooks: delete one first")
    plain = secret or SECRET_PREFIX + secrets.token_urlsafe(32)
    hook_id = uuid.uuid4()
    hook = await repo.create(
        session,
        scope,
        values={
            "id": hook_id,
            "url": url,
            "secret": sealing.seal(server_secret, PURPOSE, plain.encode(), str(hook_id)),
            "kinds": list(watch.kinds),
            "tags": tags,
            "description": description,
            "cursor": await events.head(session, scope),
            "created_by": scope.actor,
        },
    )
    return hook, plain


async def get(session: AsyncSession, scope: Scope, *, webhook_id: uuid.UUID) -> Webhook:
    hook = await repo.get(session, scope, webhook_id)
    if hook is None:
        raise NotFound(f"webhook not found: {webhook_id}")
    return hook


async def list_for(session: AsyncSession, scope: Scope) -> list[Webhook]:
    return await repo.list_for(session, scope)


async def update(
    session: AsyncSession,
    scope: Scope,
    *,
    webhook_id: uuid.UUID,
    changes: dict[str, Any],
    policy: FetchPolicy,
) -> Webhook:
    """Change a webhook's url, filters, description or whether it is active.
    Paused, it is handed no new changes; resumed, it gets those made while
    it was paused (nothing is skipped). ``changes`` holds the fields the
    request named: none is a no-op that returns the webhook as it is; a null
    is a BadRequest (every field has a value: leave a field out to keep it)."""
    hook = await get(session, scope, webhook_id=webhook_id)
    nulls = sorted(name for name, value in changes.items() if value is None)
    if nulls:
        raise BadRequest(
            f"{', '.join(nulls)} cannot be null: leave a field out to keep its value "
            '(kinds [] means every kind, tags {} any note, description "" none)'
        )
    if not changes:
        return hook
    values = dict(changes)
    if "url" in values:
        await _checked_url(values["url"], policy)
    if "kinds" in values or "tags" in values:
        watch = events.watch_of(values.get("kinds") or [], values.get("tags") or {})
        if "kinds" in values:
            values["kinds"] = list(watch.kinds)
    changed = await repo.change(session, scope, webhook_id, values=values)
    assert changed is not None
    return changed


async def cursors_of(
    session: AsyncSession, scope: Scope, *, hooks: Sequence[Webhook]
) -> dict[uuid.UUID, str | None]:
    """Each webhook's cursor as the API shows it: the id of the event its
    deliveries continue after (None before the project's first event, or
    when that event is outside the caller's tag scope). The feed's own
    numbering stays inside the service."""
    found = await feed.public_ids(session, scope, (h.cursor for h in hooks))
    return {h.id: cursors.show(found[h.cursor]) if h.cursor in found else None for h in hooks}


async def delete(session: AsyncSession, scope: Scope, *, webhook_id: uuid.UUID) -> None:
    """Delete a webhook; deliveries still queued find it gone and send nothing."""
    if not await repo.remove(session, scope, webhook_id):
        raise NotFound(f"webhook not found: {webhook_id}")


async def ping(session: AsyncSession, scope: Scope, *, webhook_id: uuid.UUID, attempts: int) -> Job:
    """Queue a delivery of one ``ping`` event (to try a receiver)."""
    await get(session, scope, webhook_id=webhook_id)
    # An id of the events' shape, of no change: receivers that drop repeats by id keep it.
    event = {
        "id": str(uuid.uuid4()),
        "kind": "ping",
        "note_id": None,
        "project": scope.project_slug,
    }
    job_id = await _enqueue(session, scope, webhook_id, [event], attempts=attempts)
    job = await jobs.get(session, scope, await jobs.public_id_of(session, scope, job_id))
    assert job is not None
    return job


async def deliveries(
    session: AsyncSession, scope: Scope, *, webhook_id: uuid.UUID, status: str | None, limit: int
) -> list[Job]:
    await get(session, scope, webhook_id=webhook_id)
    return list(
        await jobs.list_jobs(
            session,
            scope,
            status=status,
            kind=JobKind.WEBHOOK.value,
            note_id=None,
            limit=limit,
            before=None,
            payload_match=("webhook_id", str(webhook_id)),
        )
    )


async def _enqueue(
    session: AsyncSession,
    scope: Scope,
    webhook_id: uuid.UUID,
    batch: list[dict[str, Any]],
    *,
    attempts: int,
) -> int:
    return await jobs.enqueue(
        session,
        scope,
        kind=JobKind.WEBHOOK,
        note_id=None,
        payload={"webhook_id": str(webhook_id), "events": batch},
        priority=3,
        supersede=False,
        max_attempts=attempts,
    )


# -- the fan-out and the deliveries (worker) ------------------------------------------


async def due(session: AsyncSession, *, limit: int = 100) -> Sequence[repo.Due]:
    """(tenant, project, webhook) of active webhooks with new changes."""
    return await repo.due(session, limit=limit)


async def hand_off(
    session: AsyncSession, scope: Scope, *, webhook_id: uuid.UUID, attempts: int
) -> int:
    """Queue the webhook's next changes as one delivery and move its cursor
    past them, in the caller's transaction (its row locked; 0 when another
    worker holds it). Returns how many changes it looked at (a full batch,
    EVENTS_PER_DELIVERY, means more may wait)."""
    hook = await repo.get(session, scope, webhook_id, lock=True)
    if hook is None or not hook.active:
        return 0
    changes = await feed.after(
        session, scope, cursor=hook.cursor, limit=EVENTS_PER_DELIVERY, watched=True
    )
    if not changes:
        return 0
    watch = watch_of(hook)
    batch = [e for e in await events.render(session, scope, changes=changes) if watch.wants(e)]
    if batch:
        await _enqueue(session, scope, webhook_id, batch, attempts=attempts)
    await repo.change(session, scope, webhook_id, values={"cursor": changes[-1].id})
    return len(changes)


async def target(
    session: AsyncSession, scope: Scope, *, webhook_id: uuid.UUID, server_secret: str
) -> tuple[str, str] | None:
    """(url, secret) a delivery goes to, or None when the webhook is gone."""
    hook = await repo.get(session, scope, webhook_id)
    if hook is None:
        return None
    plain = sealing.unseal(server_secret, PURPOSE, hook.secret, str(hook.id)).decode()
    return hook.url, plain


async def send(
    url: str, secret: str, *, delivery_id: str, payload: dict[str, Any], policy: FetchPolicy
) -> int:
    """POST one delivery, signed; the receiver's 2xx status (or FetchFailed /
    FetchRefused)."""
    body = json.dumps(
        {"delivery_id": delivery_id, **payload}, separators=(",", ":"), default=str
    ).encode()
    headers = {SIGNATURE_HEADER: signature(secret, body), "Keepmem-Delivery": delivery_id}
    return await post(url, body, headers, policy)
