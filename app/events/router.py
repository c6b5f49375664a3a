"""Live changes (``GET /v1/events``) and webhooks (``/v1/webhooks``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Annotated

from fastapi import Depends, Header, Query, Request
from fastapi.responses import StreamingResponse
from sqlalchemy.ext.asyncio import AsyncSession

from app.db import Database
from app.deps import AdminScope, ReadScope, SessionDep, SettingsDep, get_db, server_secret
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
from app.models import Webhook
from app.notes.router import tag_params
from app.ratelimit import StreamSlots
from app.tenancy import Scope
from app.wire import api_router

router = api_router(prefix="/v1", tags=["events"])

DbDep = Annotated[Database, Depends(get_db)]


async def _stream_slot(request: Request, scope: ReadScope) -> AsyncIterator[None]:
    """One of the tenant's stream slots (429 when none is free), held until
    the response has been sent or has failed: FastAPI leaves a dependency's
    block after the response, however it ends."""
    slots: StreamSlots = request.app.state.streams
    with slots.held(scope.tenant_id):
        yield


@router.get(
    "/events",
    summary="Stream the project's changes (Server-Sent Events)",
    # No response_class: the errors keep their JSON shape in the document.
    response_model=None,
    responses={200: {"content": {"text/event-stream": {}}, "description": "An event stream."}},
    dependencies=[Depends(_stream_slot)],
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
        str | None,
        Query(description='Start after this event id (as `Last-Event-ID`); "0": the first.'),
    ] = None,
    last_event_id: Annotated[
        str | None, Header(alias="Last-Event-ID", description="Resume after this event id.")
    ] = None,
) -> StreamingResponse:
    """Each write to the project as it happens: `id` (the event's id, random
    and opaque), `event` (the kind) and `data` (JSON: the note id, its
    summary and tags when sent, the time). Resume with `Last-Event-ID` (or
    `after`): nothing made meanwhile is missed. Without either, the stream
    starts at the newest change. An id that is not one is a 400
    `invalid_cursor`; one this project does not have (erased, or another
    project's) a 400 `cursor_expired`. A comment line every
    `events_heartbeat_seconds` keeps proxies from closing an idle stream;
    `event: shutdown` ends it when the server restarts (reconnect to
    resume)."""
    watch = events.watch_of(kind, tag_params(tag), tag_key)
    if after is not None:
        start = await events.start(session, scope, after=after, name="after")
    else:
        start = await events.start(session, scope, after=last_event_id, name="Last-Event-ID")
    drain = request.app.state.drain
    return StreamingResponse(
        stream(
            db,
            scope,
            watch=watch,
            cursor=start,
            poll_s=settings.events_poll_seconds,
            heartbeat_s=settings.events_heartbeat_seconds,
            draining=lambda: drain.requested,
        ),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _shown(session: AsyncSession, scope: Scope, hooks: Sequence[Webhook]) -> list[WebhookOut]:
    shown = await webhooks.cursors_of(session, scope, hooks=hooks)
    return [WebhookOut.of(h, cursor=shown[h.id]) for h in hooks]


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
    (out,) = await _shown(session, scope, [hook])
    return WebhookCreated(**out.model_dump(), secret=secret)


@router.get("/webhooks", response_model=WebhookList, summary="List webhooks")
async def list_webhooks(scope: AdminScope, session: SessionDep) -> WebhookList:
    """The project's webhooks (secrets are never shown again)."""
    return WebhookList(
        webhooks=await _shown(session, scope, await webhooks.list_for(session, scope))
    )


@router.get("/webhooks/{webhook_id}", response_model=WebhookOut, summary="Get a webhook")
async def get_webhook(webhook_id: WebhookId, scope: AdminScope, session: SessionDep) -> WebhookOut:
    """One webhook of the project."""
    hook = await webhooks.get(session, scope, webhook_id=webhook_id)
    return (await _shown(session, scope, [hook]))[0]


@router.patch("/webhooks/{webhook_id}", response_model=WebhookOut, summary="Change a webhook")
async def update_webhook(
    webhook_id: WebhookId,
    body: WebhookPatch,
    scope: AdminScope,
    session: SessionDep,
    settings: SettingsDep,
) -> WebhookOut:
    """Change the URL, filters or description, or pause (`active: false`)
    and resume: a paused webhook's changes wait for it. Fields left out keep
    their value (an empty body changes nothing and returns the webhook); a
    field sent as `null` is a 400."""
    changes = body.model_dump(exclude_unset=True)
    hook = await webhooks.update(
        session, scope, webhook_id=webhook_id, changes=changes, policy=_policy(settings)
    )
    return (await _shown(session, scope, [hook]))[0]


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
