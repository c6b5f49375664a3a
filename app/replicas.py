"""Read replicas with read-your-writes (``KEEPMEM_DATABASE_REPLICA_URLS``).

Finds, lists and gets run on a streaming standby of the primary; everything
else on the primary. Three pieces:

- ``ReplicaSet``: one engine per replica and a health loop. Each round reads
  the primary's WAL position and each replica's replayed position; a
  replica that cannot be reached, is no longer a standby, or is further
  behind than ``replica_max_lag_seconds`` leaves the rotation and comes
  back by itself once a round finds it well. Lag is measured against the
  primary's own history (when it first passed the position a replica has
  reached), not against ``pg_last_xact_replay_timestamp()``, which makes an
  idle primary look like a lagging replica.
- Read-your-writes: a committed write answers with its consistency token
  (``X-Keepmem-Consistency``, the primary's WAL position read after the
  commit). A read sending it back is served by a replica that has replayed
  that position, polled for up to ``replica_wait_ms``, else by the primary.
- The safety net, ``ReplicaRouting`` (ASGI): a replica's transaction is read
  only. The incidental writes of a read (a key's last use, a note's access
  time) are queued on the session (:func:`incidental`) and run on the
  primary after the read, in a small transaction of their own; anything
  else a replica fails at (a write nobody foresaw, the replica dying, a
  replay conflict) re-runs the request on the primary, counted in
  ``keepmem_replica_retries_total``, never answered as a 5xx.

Without replica URLs nothing here runs: no middleware, no engines, and
:func:`incidental` writes in the request's own transaction as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncSession
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import metrics, tenancy
from app.db import (
    Database,
    causes,
    is_outage,
    lsn_text,
    parse_lsn,
    replay_status,
    sqlstate,
    wal_position,
)
from app.errors import AppError
from app.logs import log_failure
from app.settings import Settings
from app.tenancy import TenantScope

log = logging.getLogger("keepmem.replicas")

HEADER = "X-Keepmem-Consistency"
_HEADER = HEADER.lower().encode()
#: Where a request's routing (an ``Attempt``) travels in the ASGI scope.
SCOPE_KEY = "keepmem.replicas"
#: A status check that takes longer counts as a failure (a hung server).
CHECK_TIMEOUT_S = 2.0
#: How often a read with a token looks again at a replica's position.
POLL_S = 0.003
#: Request bodies kept for a re-run on the primary (a find's is a few hundred
#: bytes); a larger one is never sent to a replica.
MAX_REPLAY_BYTES = 256 * 1024
#: The primary's positions remembered for measuring lag.
HISTORY_S = 120.0

# Session.info keys: the incidental writes queued on a replica's session.
_DEFERRED = "keepmem.deferred_writes"

Write = Callable[[AsyncSession], Awaitable[object]]


@dataclass(eq=False)
class Replica:
    """One replica: its engine, what the last check found."""

    name: str
    db: Database
    replayed: int = -1  # WAL position replayed, as last seen
    lag: float | None = None  # seconds; None: unreachable or not a standby
    in_rotation: bool = False
    _refreshing: asyncio.Future[int] | None = field(default=None, repr=False)

    async def refresh(self) -> int:
        """Its replayed position now. Concurrent callers share one query."""
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.ensure_future(self._read())
            # retrieved even when every caller was cancelled meanwhile
            self._refreshing.add_done_callback(lambda f: f.cancelled() or f.exception())
        return await asyncio.shield(self._refreshing)

    async def _read(self) -> int:
        standby, position = await asyncio.wait_for(replay_status(self.db.engine), CHECK_TIMEOUT_S)
        if not standby:
            raise RuntimeError(f"{self.name} is not a standby (promoted?)")
        # Not the highest ever seen: a standby restarted replays again from
        # its last restart point, and until it is back there it shows less.
        self.replayed = position
        return position


class ReplicaSet:
    """The replicas of one API process, their health loop and the choice of
    the replica that serves a read."""

    def __init__(self, primary: Database, replicas: list[Replica], settings: Settings) -> None:
        self.primary = primary
        self.replicas = replicas
        self.wait_s = settings.replica_wait_ms / 1000
        self.max_lag_s = settings.replica_max_lag_seconds
        # A few checks within the lag limit, at most one a second.
        self.interval_s = max(min(1.0, self.max_lag_s / 4), 0.05)
        self._history: deque[tuple[float, int]] = deque()  # (when first seen, position)
        self._turn = 0
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def from_settings(cls, settings: Settings, primary: Database) -> ReplicaSet | None:
        if not settings.database_replica_urls:
            return None
        replicas = [
            Replica(
                name=f"replica{i}",
                db=Database(
                    url,
                    pool_size=settings.db_pool_size,
                    max_overflow=settings.db_max_overflow,
                    pgbouncer=settings.db_pgbouncer,
                    read_only=True,
                ),
            )
            for i, url in enumerate(settings.database_replica_urls)
        ]
        return cls(primary, replicas, settings)

    async def start(self) -> None:
        """Check every replica once (a fresh process serves from them at
        once), then keep checking in the background."""
        await self.check()
        self._task = asyncio.create_task(self._watch())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for replica in self.replicas:
            await replica.db.dispose()

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.check()
            except Exception as exc:  # noqa: BLE001 - the loop must outlive any one round
                log_failure(log, "replica check failed", exc)

    async def check(self) -> None:
        """One round: the primary's position, then each replica's."""
        now = time.monotonic()
        try:
            position = await asyncio.wait_for(wal_position(self.primary.engine), CHECK_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - a primary outage is not the replicas'
            # Without the primary the replicas are judged on the history so far.
            log_failure(log, "could not read the primary's WAL position", exc)
        else:
            if not self._history or position > self._history[-1][1]:
                self._history.append((now, position))
            while len(self._history) > 1 and now - self._history[0][0] > HISTORY_S:
                self._history.popleft()
        await asyncio.gather(*(self._check_one(r, now) for r in self.replicas))

    async def _check_one(self, replica: Replica, now: float) -> None:
        try:
            replayed = await replica.refresh()
        except Exception as exc:  # noqa: BLE001 - any failure takes it out of rotation
            self.drop(replica, f"check failed: {type(exc).__name__}: {str(exc)[:200]}")
            return
        replica.lag = self._lag(replayed, now)
        well = replica.lag <= self.max_lag_s
        if well != replica.in_rotation:
            log.warning(
                "%s %s the rotation (lag %.1f s)",
                replica.name,
                "joins" if well else "leaves",
                replica.lag,
            )
        replica.in_rotation = well
        metrics.observe_replica(replica.name, lag=replica.lag, in_rotation=well)

    def _lag(self, replayed: int, now: float) -> float:
        """Seconds since the primary first stood past ``replayed`` (0 when
        the replica has everything the primary had at the last check)."""
        for seen_at, position in self._history:
            if position > replayed:
                return max(now - seen_at, 0.0)
        return 0.0

    def drop(self, replica: Replica, why: str) -> None:
        """Out of the rotation until a check finds it well again."""
        if replica.in_rotation:
            log.warning("%s leaves the rotation: %s", replica.name, why)
        replica.in_rotation = False
        replica.lag = None
        metrics.observe_replica(replica.name, lag=None, in_rotation=False)

    def rotation(self) -> list[Replica]:
        """The replicas in rotation, the next one's turn first."""
        healthy = [r for r in self.replicas if r.in_rotation]
        if not healthy:
            return []
        self._turn = (self._turn + 1) % len(healthy)
        return healthy[self._turn :] + healthy[: self._turn]

    async def for_read(self, token: int | None) -> Replica | None:
        """The replica to serve a read, or None for the primary. With a
        token: one that has replayed it, waiting up to ``replica_wait_ms``."""
        candidates = self.rotation()
        if token is None:
            return candidates[0] if candidates else None
        for replica in candidates:
            if replica.replayed >= token:
                metrics.CONSISTENT_READS.labels("replica").inc()
                return replica
        deadline = time.monotonic() + self.wait_s
        while candidates:
            for replica in list(candidates):
                try:
                    replayed = await replica.refresh()
                except Exception as exc:  # noqa: BLE001 - a failing replica is dropped
                    self.drop(replica, f"{type(exc).__name__}: {str(exc)[:200]}")
                    candidates.remove(replica)
                    continue
                if replayed >= token:
                    metrics.CONSISTENT_READS.labels("waited").inc()
                    return replica
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(POLL_S)
        metrics.CONSISTENT_READS.labels("primary").inc()
        return None


# -- a request's routing ----------------------------------------------------------


class Attempt:
    """One run of a request: the client's token, where its reads may go,
    what served them, and the token it answers with."""

    def __init__(self, replicas: ReplicaSet, token: int | None, *, on_primary: bool) -> None:
        self.replicas = replicas
        self.token = token
        self.on_primary = on_primary
        self.replayable = True  # its body is kept whole for a re-run
        self.replica: Replica | None = None
        self.failed: str | None = None  # why the replica failed it: re-run on the primary
        self.position: int | None = None  # a committed write's WAL position

    async def choose(self, read: bool) -> Replica | None:
        """The replica this request's unit of work runs on (None: the primary)."""
        if read and not self.on_primary and self.replayable:
            self.replica = await self.replicas.for_read(self.token)
        return self.replica

    def give_up(self, exc: BaseException, *, read: bool) -> bool:
        """Whether the replica's failure ``exc`` sends the request to the
        primary (any failure but an answer the app chose, such as a 404)."""
        if self.replica is not None and (not isinstance(exc, AppError) or is_outage(exc)):
            self.failed = _reason(exc)
            if self.failed == "unavailable":
                self.replicas.drop(self.replica, f"a read failed: {str(exc)[:200]}")
            return True
        self._count(read)
        return False

    def _count(self, read: bool) -> None:
        if self.replica is not None:
            metrics.READS.labels("replica").inc()
        elif read:
            metrics.READS.labels("primary").inc()

    async def finish(self, session: AsyncSession, *, read: bool, write: bool) -> None:
        """After the unit of work committed: a replica read's incidental
        writes run on the primary; a write learns its token."""
        self._count(read)
        primary = self.replicas.primary
        if self.replica is not None:
            queued: list[tuple[TenantScope, Write]] = session.info.get(_DEFERRED) or []
            if queued:
                await _run_deferred(primary, queued)
        elif write:
            try:
                self.position = await wal_position(primary.engine)
            except Exception as exc:  # noqa: BLE001 - committed already: answer without a token
                log_failure(log, "could not read the WAL position after a write", exc)


def _reason(exc: BaseException) -> str:
    if is_outage(exc):
        return "unavailable"
    for err in causes(exc):
        state = sqlstate(err)
        if state in ("25006", "25P02"):  # read-only transaction; aborted by such an error
            return "read_only"
        if state == "40001":  # cancelled by a conflict with recovery
            return "conflict"
    return "error"


def routing_of(scope: Scope) -> Attempt | None:
    """The request's routing (None: no replicas configured)."""
    found = scope.get(SCOPE_KEY)
    return found if isinstance(found, Attempt) else None


def on_replica(session: AsyncSession) -> None:
    """Mark a unit of work's session as a replica's: incidental writes queue."""
    session.info[_DEFERRED] = []


async def incidental(session: AsyncSession, scope: TenantScope, write: Write) -> None:
    """A write a read makes on the side (a key's last use, a note's access
    time): run now in the session's transaction, or, on a replica's, queued
    to run on the primary after the read (a failure there is logged and
    counted, and the read answers all the same)."""
    queued: list[tuple[TenantScope, Write]] | None = session.info.get(_DEFERRED)
    if queued is None:
        await write(session)
    else:
        queued.append((scope, write))


async def _run_deferred(primary: Database, queued: list[tuple[TenantScope, Write]]) -> None:
    try:
        async with primary.transaction() as session:
            for scope, write in queued:
                await tenancy.bind(session, scope)
                await write(session)
    except Exception as exc:  # noqa: BLE001 - bookkeeping only: the read itself succeeded
        metrics.REPLICA_RETRIES.labels("deferred_write").inc()
        log_failure(log, "a replica read's incidental write failed on the primary", exc)


class ReplicaRouting:
    """Pure ASGI: gives each request its routing (``Attempt``), adds a
    write's consistency token to the answer, and re-runs on the primary a
    request a replica failed, before anything of its answer was sent (its
    body is kept for that; reads' bodies are small)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        app = scope.get("app")
        replicas: ReplicaSet | None = getattr(getattr(app, "state", None), "replicas", None)
        if scope["type"] != "http" or replicas is None:
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        given = headers.get(_HEADER, b"").decode("latin-1")
        token = parse_lsn(given) if given else None  # a malformed token is ignored
        attempt = Attempt(replicas, token, on_primary=False)
        first = dict(scope)
        first[SCOPE_KEY] = attempt
        kept: list[Message] = []
        size = 0

        async def keeping() -> Message:
            nonlocal size
            message = await receive()
            if message["type"] == "http.request" and attempt.replayable:
                size += len(message.get("body", b""))
                if size > MAX_REPLAY_BYTES:
                    attempt.replayable = False
                    kept.clear()
                else:
                    kept.append(message)
            return message

        started = False

        async def answer(message: Message) -> None:
            nonlocal started
            if attempt.failed is not None and not started:
                return  # the primary answers instead
            if message["type"] == "http.response.start":
                started = True
                if attempt.position is not None:
                    message = dict(message)
                    token_header = (_HEADER, lsn_text(attempt.position).encode())
                    message["headers"] = [*message.get("headers", []), token_header]
            await send(message)

        try:
            await self.app(first, keeping, answer)
        except Exception:
            if attempt.failed is None or started:
                raise
        scope["route"] = first.get("route")  # for the request metrics around
        if attempt.failed is None or started:
            return
        metrics.REPLICA_RETRIES.labels(attempt.failed).inc()
        again = dict(scope)
        again[SCOPE_KEY] = Attempt(replicas, token, on_primary=True)
        replay = iter(list(kept))

        async def replayed() -> Message:
            return next(replay, None) or await receive()

        await self.app(again, replayed, send)
        scope["route"] = again.get("route")
