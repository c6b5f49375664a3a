"""Live changes (``GET /v1/events``) and webhooks (``/v1/webhooks``)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Header, Query, Request
from fastapi.responses import StreamingResponse

from app.db import Database
from app.deps import AdminScope, ReadScope, SessionDep, SettingsDep, get_db, server_secret
from app.errors import BadRequest, TooManyRequests
from app.events import service as events
from app.events import webhooks
from app.events.schemas import (
    DeliveryList,
    WebhookCreated,
    WebhookId,
    WebhookIn,
    WebhookList,
    WebhookOut,
    WebhookPatch,
)
from app.events.stream import stream
from app.jobs.schemas import JobOut
from app.kit.fetch import FetchPolicy
from app.notes.router import tag_params
from app.wire import api_router

router = api_router(prefix="/v1", tags=["events"])

DbDep = Annotated[Database, Depends(get_db)]


def _cursor(raw: str | None, after: int | None) -> int | None:
    if after is not None:
        return after
    if raw is None or not raw.strip():
        return None
    if not raw.strip().isdigit() or len(raw.strip()) > 18:
        raise BadRequest(f"Last-Event-ID {raw[:40]!r} is not an event id")
    return int(raw.strip())


@router.get(
    "/events",
    summary="Stream the project's changes (Server-Sent Events)",
    # No response_class: the errors keep their JSON shape in the document.
    response_model=None,
    responses={200: {"content": {"text/event-stream": {}}, "description": "An event stream."}},
)
async def event_stream(
    request: Request,
    scope: ReadScope,
    session: SessionDep,
    settings: SettingsDep,
    db: DbDep,
    kind: Annotated[
        list[str],
        Query(
            description="Kinds wanted (repeat or comma-separate): put, tag, delete, move, "
            "revert, summary, embedding, parts, failed. All when left out."
        ),
    ] = [],  # noqa: B006
    tag: Annotated[
        list[str], Query(description="`key=value` the note must hold; repeat to AND.")
    ] = [],  # noqa: B006
    tag_key: Annotated[list[str], Query(description="Tag key the note must hold.")] = [],  # noqa: B006
    after: Annotated[
        int | None,
        Query(ge=0, le=2**62, description="Start after this event id (as `Last-Event-ID`)."),
    ] = None,
    last_event_id: Annotated[
        str | None,
        Header(alias="Last-Event-ID", description="Resume after this event id.", max_length=40),
    ] = None,
) -> StreamingResponse:
    """Each write to the project as it happens: `id` (the change id),
    `event` (the kind) and `data` (JSON: the note id, its summary and tags
    when sent, the time). Resume with `Last-Event-ID` (or `after`): nothing
    made meanwhile is missed. Without either, the stream starts at the newest
    change. A comment line every `events_heartbeat_seconds` keeps proxies
    from closing an idle stream; `event: shutdown` ends it when the server
    restarts (reconnect to resume)."""
    watch = events.watch_of(kind, tag_params(tag), tag_key)
    start = _cursor(last_event_id, after)
    if start is None:
        start = await events.head(session, scope)
    open_streams: dict[uuid.UUID, int] = request.app.state.event_streams
    if open_streams.get(scope.tenant_id, 0) >= settings.events_max_streams_per_tenant:
        raise TooManyRequests(
            f"at most {settings.events_max_streams_per_tenant} open event streams per tenant: "
            "close one, or use a webhook",
            headers={"Retry-After": "10"},
        )
    drain = request.app.state.drain

    async def body() -> AsyncIterator[str]:
        open_streams[scope.tenant_id] = open_streams.get(scope.tenant_id, 0) + 1
        try:
            async for chunk in stream(
                db,
                scope,
                watch=watch,
                cursor=start,
                poll_s=settings.events_poll_seconds,
                heartbeat_s=settings.events_heartbeat_seconds,
                draining=lambda: drain.requested,
            ):
                yield chunk
        finally:
            open_streams[scope.tenant_id] -= 1

    return StreamingResponse(
        body(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _policy(settings: SettingsDep) -> FetchPolicy:
    return FetchPolicy.for_settings(settings, timeout_seconds=settings.webhook_timeout_seconds)


@router.post("/webhooks", response_model=WebhookCreated, status_code=201, summary="Add a webhook")
async def create_webhook(
    body: WebhookIn, scope: AdminScope, session: SessionDep, settings: SettingsDep
) -> WebhookCreated:
    """Register a URL to receive the project's changes from now on, POSTed
    as JSON batches signed with `Keepmem-Signature: t=<unix>,v1=<hex>`
    (HMAC-SHA256 of `"<t>." + body` with the secret, shown once here)."""
    hook, secret = await webhooks.create(
        session,
        scope,
        url=body.url,
        kinds=body.kinds,
        tags=body.tags,
        description=body.description,
        secret=body.secret,
        server_secret=server_secret(settings),
        policy=_policy(settings),
    )
    return WebhookCreated(**WebhookOut.of(hook).model_dump(), secret=secret)


@router.get("/webhooks", response_model=WebhookList, summary="List webhooks")
async def list_webhooks(scope: AdminScope, session: SessionDep) -> WebhookList:
    """The project's webhooks (secrets are never shown again)."""
    return WebhookList(webhooks=[WebhookOut.of(h) for h in await webhooks.list_for(session, scope)])


@router.get("/webhooks/{webhook_id}", response_model=WebhookOut, summary="Get a webhook")
async def get_webhook(webhook_id: WebhookId, scope: AdminScope, session: SessionDep) -> WebhookOut:
    """One webhook of the project."""
    return WebhookOut.of(await webhooks.get(session, scope, webhook_id=webhook_id))


@router.patch("/webhooks/{webhook_id}", response_model=WebhookOut, summary="Change a webhook")
async def update_webhook(
    webhook_id: WebhookId,
    body: WebhookPatch,
    scope: AdminScope,
    session: SessionDep,
    settings: SettingsDep,
) -> WebhookOut:
    """Change the URL, filters or description, or pause (`active: false`)
    and resume: a paused webhook's changes wait for it."""
    changes = body.model_dump(exclude_none=True)
    hook = await webhooks.update(
        session, scope, webhook_id=webhook_id, changes=changes, policy=_policy(settings)
    )
    return WebhookOut.of(hook)


@router.delete("/webhooks/{webhook_id}", status_code=204, summary="Delete a webhook")
async def delete_webhook(webhook_id: WebhookId, scope: AdminScope, session: SessionDep) -> None:
    """Delete a webhook; its queued deliveries are not sent."""
    await webhooks.delete(session, scope, webhook_id=webhook_id)


@router.post(
    "/webhooks/{webhook_id}/ping", response_model=JobOut, status_code=202, summary="Ping a webhook"
)
async def ping_webhook(
    webhook_id: WebhookId, scope: AdminScope, session: SessionDep, settings: SettingsDep
) -> JobOut:
    """Queue a delivery of one `ping` event, to try the receiver."""
    job = await webhooks.ping(
        session, scope, webhook_id=webhook_id, attempts=settings.webhook_max_attempts
    )
    return JobOut.of(job)


@router.get(
    "/webhooks/{webhook_id}/deliveries", response_model=DeliveryList, summary="Webhook deliveries"
)
async def list_deliveries(
    webhook_id: WebhookId,
    scope: AdminScope,
    session: SessionDep,
    status: Annotated[str | None, Query(description="pending, running, done, dead ...")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> DeliveryList:
    """The webhook's deliveries, newest first, with attempts, the last error
    and, once done, the receiver's status."""
    rows = await webhooks.deliveries(
        session, scope, webhook_id=webhook_id, status=status, limit=limit
    )
    return DeliveryList(deliveries=[JobOut.of(j) for j in rows])
