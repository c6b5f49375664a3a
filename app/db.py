"""Engine and sessions. Binding a transaction to a tenant (row-level
security) is ``app.tenancy``'s.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from app.settings import Settings


def async_url(url: str) -> str:
    """Accept plain ``postgresql://`` URLs and use the asyncpg driver."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+asyncpg://" + url[len(prefix) :]
    return url


def _unique_statement_name() -> str:
    return f"__asyncpg_{uuid.uuid4().hex}__"


#: asyncpg behind PgBouncer in transaction pooling: a client connection is
#: lent a different server connection for each transaction, so prepared
#: statements must not be cached across transactions (no statement cache)
#: and their names must never collide on a server connection (random names).
#: Settings are only ever set transaction-locally (``set_config(..., true)``)
#: and no session state is relied on, so nothing else changes.
PGBOUNCER_CONNECT_ARGS = {
    "statement_cache_size": 0,
    "prepared_statement_cache_size": 0,
    "prepared_statement_name_func": _unique_statement_name,
}


class Database:
    """One engine and session factory per process, created by the app lifespan."""

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 10,
        max_overflow: int = 10,
        pgbouncer: bool = False,
        read_only: bool = False,
    ) -> None:
        connect_args: dict[str, Any] = dict(PGBOUNCER_CONNECT_ARGS) if pgbouncer else {}
        if read_only:
            # A read replica's connections (app.replicas): read-only even on
            # a server that is not (yet, or no longer) a standby, so a write
            # can never land there; and a server that does not answer costs
            # seconds, not asyncpg's default minute.
            connect_args["server_settings"] = {"default_transaction_read_only": "on"}
            connect_args["timeout"] = REPLICA_CONNECT_TIMEOUT_S
        self.engine: AsyncEngine = create_async_engine(
            async_url(url),
            pool_size=pool_size,
            max_overflow=max_overflow,
            pool_pre_ping=True,
            connect_args=connect_args,
        )
        self.sessions = async_sessionmaker(self.engine, expire_on_commit=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> Database:
        if not settings.database_url:
            raise RuntimeError("KEEPMEM_DATABASE_URL is not set")
        return cls(
            settings.database_url,
            pool_size=settings.db_pool_size,
            max_overflow=settings.db_max_overflow,
            pgbouncer=settings.db_pgbouncer,
        )

    def pool_status(self) -> dict[str, int]:
        """The pool's connections (for the metrics)."""
        pool = self.engine.pool
        figures: dict[str, int] = {}
        for name, read in (
            ("in_use", "checkedout"),
            ("idle", "checkedin"),
            ("overflow", "overflow"),
            ("size", "size"),
        ):
            method = getattr(pool, read, None)
            figures[name] = max(int(method()), 0) if callable(method) else 0
        return figures

    async def dispose(self) -> None:
        await self.engine.dispose()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncSession]:
        """A session in one transaction with no tenant set; commits on success."""
        async with self.sessions() as session, session.begin():
            yield session


# -- replication status (app.replicas) -------------------------------------------

REPLICA_CONNECT_TIMEOUT_S = 5.0


def lsn_text(position: int) -> str:
    """A WAL position in PostgreSQL's own text form (``16/B374D848``)."""
    return f"{position >> 32:X}/{position & 0xFFFFFFFF:X}"


def parse_lsn(value: str) -> int | None:
    """A WAL position from its text form; None when it is not one."""
    high, sep, low = value.strip().partition("/")
    if not sep or not (0 < len(high) <= 8 and 0 < len(low) <= 8):
        return None
    try:
        return (int(high, 16) << 32) | int(low, 16)
    except ValueError:
        return None


async def wal_position(engine: AsyncEngine) -> int:
    """The primary's WAL position now, as a number. Read after a commit
    returned, it is at or past that commit's record, so a standby that has
    replayed up to it sees the commit. The insert position, not the write
    position: with ``synchronous_commit = off`` a commit returns before its
    record is written, and the write position may still lie before it."""
    async with engine.execution_options(isolation_level="AUTOCOMMIT").connect() as conn:
        found = await conn.scalar(text("SELECT (pg_current_wal_insert_lsn() - '0/0')::bigint"))
    return int(found)


async def replay_status(engine: AsyncEngine) -> tuple[bool, int]:
    """(still a standby, the WAL position it has replayed) of a replica; a
    server out of recovery (promoted, or never a standby) reports its
    position as -1."""
    async with engine.execution_options(isolation_level="AUTOCOMMIT").connect() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT pg_is_in_recovery(), "
                    "coalesce((pg_last_wal_replay_lsn() - '0/0')::bigint, -1)"
                )
            )
        ).one()
    standby = bool(row[0])
    return standby, int(row[1]) if standby else -1


class Params:
    """The positional parameters of a hand-written statement: ``p(value)``
    adds one and gives its ``$n``; ``p.once(name, value)`` gives the same
    ``$n`` each time it is asked for ``name`` (the tenant, the project)."""

    __slots__ = ("_named", "values")

    def __init__(self) -> None:
        self.values: list[Any] = []
        self._named: dict[str, str] = {}

    def __call__(self, value: Any) -> str:
        self.values.append(value)
        return f"${len(self.values)}"

    def once(self, name: str, value: Any) -> str:
        if name not in self._named:
            self._named[name] = self(value)
        return self._named[name]


async def driver(session: AsyncSession) -> Any:
    """The asyncpg connection under the session's transaction (its binding
    to a tenant included). find's statements run on it directly: building,
    compiling and reading a statement through SQLAlchemy cost ten times
    what the statement costs in PostgreSQL (2.1 ms against 0.16 ms for the
    page's notes, measured in the suite's database). asyncpg prepares each
    statement once per connection."""
    connection = await session.connection()
    return (await connection.get_raw_connection()).driver_connection


def json_value(value: Any) -> Any:
    """A json/jsonb column read through ``driver``: SQLAlchemy's dialect
    registers asyncpg codecs that decode it on every connection it opens;
    a string is decoded here (a connection without them)."""
    return json.loads(value) if isinstance(value, str | bytes) else value


# SQLSTATEs of a server that is gone or going: connection exceptions (class
# 08), admin/crash shutdown and "cannot connect now" (starting up, recovering).
_OUTAGE_STATES = ("08", "57P01", "57P02", "57P03")


def causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every error behind it (raised from, raised during, the
    driver's own under SQLAlchemy's), each once."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        err = todo.pop()
        if err is None or id(err) in seen:
            continue
        seen.add(id(err))
        yield err
        todo += [err.__cause__, err.__context__, getattr(err, "orig", None)]


def sqlstate(err: BaseException) -> str | None:
    """The SQLSTATE an error carries (asyncpg's or psycopg's name for it)."""
    state = getattr(err, "sqlstate", None) or getattr(err, "pgcode", None)
    return state if isinstance(state, str) else None


def is_outage(exc: BaseException) -> bool:
    """Whether an error means the database cannot be reached (rather than a
    bad statement): the API answers 503 for those, and recovers by itself
    when the server is back (the pool pre-pings and reconnects)."""
    from sqlalchemy import exc as sa_exc

    for err in causes(exc):
        if isinstance(err, OSError | sa_exc.TimeoutError):  # refused, reset, pool timeout
            return True
        if isinstance(err, sa_exc.DBAPIError) and err.connection_invalidated:
            return True
        state = sqlstate(err)
        if isinstance(state, str) and state.startswith(_OUTAGE_STATES):
            return True
        name = type(err).__name__
        if name == "TargetServerAttributeNotMatched":
            return True  # a failover under way: every server reached is a standby
        if (
            name in ("ConnectionDoesNotExistError", "InterfaceError")
            and "connection" in str(err).lower()
        ):
            return True
    return False


def refusal(exc: BaseException) -> tuple[str, str] | None:
    """A write the database refused on purpose, as (kind, message): row-level
    security (SQLSTATE 42501 naming a policy: a tag-scoped credential
    reaching past its scope) or a quota (KMQ01, raised by the usage
    triggers). None for anything else."""
    for err in causes(exc):
        state = sqlstate(err)
        if state == "42501" and "row-level security" in str(err):
            return "scope", "this write reaches outside the credential's tag scope"
        if state == "KMQ01":
            message = getattr(err, "message", None) or str(err)
            return "quota", str(message).splitlines()[0]
    return None


async def role_sees_every_tenant(session: AsyncSession) -> bool:
    """Whether the connected role is a superuser or bypasses row-level
    security (the schema owner): keepmem's application role does neither."""
    found = await session.scalar(
        text("SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user")
    )
    return bool(found)
