"""Backups of the embedded PostgreSQL: ``keepmem backup`` and ``keepmem
up``'s schedule (KEEPMEM_BACKUP_DIR). A base backup plus continuous WAL
archiving into one destination (its layout: ``app.cli.restore``, which
restores from it to any time it covers).

Why the choices:

* The server archives its own WAL (``archive_mode = on`` with the
  ``basic_archive`` module PostgreSQL ships), not a supervised
  ``pg_receivewal``: PostgreSQL keeps a segment until it is archived, so a
  destination that is unreachable for a while delays the archive and loses
  nothing, and there is no extra process, replication slot or restart
  policy to keep right. basic_archive copies durably (fsync, then rename)
  and refuses to overwrite a different file. The costs: ``archive_mode``
  takes one restart (said when it happens), and a quiet server's archive
  trails by up to ``KEEPMEM_BACKUP_ARCHIVE_TIMEOUT_SECONDS`` (a segment is
  archived when full or when that timeout passes): what a lost disk can
  lose. ``pg_receivewal`` would lose less there, at the price of a slot
  that fills the primary's disk whenever it stops.
* Base backups are tar, gzip level 1 (a fraction of the cluster's size,
  fast to write), each with the WAL that makes it consistent (restorable
  even without the archive), and verified after writing:
  ``pg_verifybackup`` checks every file against the manifest and
  ``pg_waldump`` reads the WAL range (pg_verifybackup cannot read WAL
  inside a tar).
* After a failover the promoted standby is backed up; a standby made after
  archiving was turned on archives by itself once promoted, one made
  before is turned on by the next backup (one restart).
* An object store (``s3://``) is reached through a local spool: the
  spool is the directory destination all of this writes, and
  ``app.cli.objectstore`` mirrors it to the store (``keepmem backup``
  before it reports done, ``keepmem up`` every few seconds).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import re
import shutil
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from app.cli import objectstore
from app.cli.embedded import (
    DATABASE,
    SUPERUSER,
    EmbeddedError,
    EmbeddedPostgres,
    give_to_server,
    server_account,
)
from app.cli.restore import (
    BASE,
    INFO,
    WAL,
    BackupError,
    BaseBackup,
    destination,
    list_backups,
    verify,
)
from app.cli.restore import run_program as _run
from app.settings import Settings


@contextlib.contextmanager
def _locked(dest: Path) -> Iterator[None]:
    """One backup or prune at a time per destination."""
    dest.mkdir(parents=True, exist_ok=True)
    with open(dest / "lock", "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise BackupError(f"another backup of {dest} is running") from exc
        yield


# -- WAL archiving ---------------------------------------------------------------------


def _setting(pg: EmbeddedPostgres, name: str) -> str:
    return pg.psql(f"SELECT current_setting('{name}', true)").strip()


def _configured(pg: EmbeddedPostgres) -> dict[str, str]:
    """The settings as the configuration files say (the last line of each
    wins): what SHOW says can differ in form ('5min', '(disabled)')."""
    rows = pg.psql("SELECT name || '=' || setting FROM pg_file_settings ORDER BY seqno")
    return dict(line.split("=", 1) for line in rows.splitlines() if "=" in line)


def configure_archiving(pg: EmbeddedPostgres, dest: Path, *, timeout_s: int) -> bool:
    """Have ``pg`` archive every WAL segment into ``dest/wal``. Returns True
    when it had to restart (``archive_mode``, once); an archive_command of
    someone else's is left alone and refused."""
    wal = dest / WAL
    wal.mkdir(parents=True, exist_ok=True)
    if (user := server_account()) is not None and wal.owner() != user:
        give_to_server(wal)
    configured = _configured(pg)
    if command := configured.get("archive_command"):
        raise BackupError(f"the server archives with archive_command = {command!r}; not ours")
    wanted = {
        "archive_library": "basic_archive",
        "basic_archive.archive_directory": str(wal),
        "archive_timeout": str(timeout_s),
    }
    changes = [
        f"ALTER SYSTEM SET {name} = '{value.replace(chr(39), chr(39) * 2)}';"
        for name, value in wanted.items()
        if configured.get(name) != value
    ]
    restart = _setting(pg, "archive_mode") != "on"
    if restart:
        changes.append("ALTER SYSTEM SET archive_mode = 'on';")
    if not changes:
        return False
    pg.psql("".join(changes) + " SELECT pg_reload_conf();")
    if restart:
        try:  # (a supervisor may have started it again first: then it runs with them too)
            _run(
                "pg_ctl", "-D", str(pg.pgdata), "-w", "-m", "fast", "-l",
                str(pg.pgdata / "log"), "restart", as_server=True, timeout=300,
            )  # fmt: skip
        except BackupError:
            if not (pg.alive() and _setting(pg, "archive_mode") == "on"):
                raise
    return restart


def archive_now(pg: EmbeddedPostgres, dest: Path, *, timeout: float = 60.0) -> str:
    """Close the current WAL segment and return once it is in the archive:
    everything committed so far can then be restored."""
    # A commit first: it marks the time the archive reaches (a restore needs
    # a commit after its target), and a segment nothing was written to is
    # not switched (pg_switch_wal would name it, and it is archived later).
    pg.psql("SELECT pg_current_xact_id()")
    segment = pg.psql("SELECT pg_walfile_name(pg_switch_wal())").strip()
    deadline = time.monotonic() + timeout
    # (an uploader may have sent it on from a spool already)
    while not (dest / WAL / segment).exists() and not _archived(pg, segment):
        if time.monotonic() > deadline:
            failed = pg.psql("SELECT last_failed_wal FROM pg_stat_archiver").strip()
            raise BackupError(
                f"{segment} did not reach {dest / WAL} in {timeout:.0f}s"
                + (f" (archiving {failed} failed; see {pg.pgdata / 'log'})" if failed else "")
            )
        time.sleep(0.05)
    return segment


def _archived(pg: EmbeddedPostgres, segment: str) -> bool:
    last = pg.psql("SELECT last_archived_wal FROM pg_stat_archiver").strip()
    return len(last) == 24 and last[:8] == segment[:8] and last >= segment


# -- base backups ----------------------------------------------------------------------


def take_backup(
    pg: EmbeddedPostgres, dest: Path, *, data_dir: Path, archive_timeout_s: int = 300
) -> BaseBackup:
    """A verified base backup of ``pg`` into ``dest``, with WAL archiving on
    (so the archive continues from it) and the current WAL segment archived."""
    configure_archiving(pg, dest, timeout_s=archive_timeout_s)
    with _locked(dest):
        stamp = datetime.now(UTC)
        name = stamp.strftime("%Y%m%dT%H%M%S.%fZ")
        partial = dest / BASE / f".partial-{name}"
        partial.parent.mkdir(parents=True, exist_ok=True)
        _run(
            "pg_basebackup", "-D", str(partial), "-F", "t", "-Z", "client-gzip:1",
            "-X", "stream", "-c", "fast", "-h", pg.socket_dir, "-p", str(pg.port),
            "-U", SUPERUSER, "--no-password", "--manifest-checksums=CRC32C",
        )  # fmt: skip
        finished = datetime.now(UTC)
        verify(partial)
        with tarfile.open(partial / "base.tar.gz") as tar:
            member = tar.extractfile("backup_label")
            label = member.read().decode() if member is not None else ""
        start_wal = re.search(r"START WAL LOCATION: \S+ \(file (\w+)\)", label)
        if start_wal is None:
            raise BackupError(f"no start WAL in the backup label of {partial}")
        if (data_dir / "secrets.json").exists():
            shutil.copy2(data_dir / "secrets.json", partial / "secrets.json")
        revision = pg.psql("SELECT version_num FROM alembic_version", DATABASE).strip()
        info = {
            "started": stamp.isoformat(),
            "finished": finished.isoformat(),
            "start_wal": start_wal.group(1),
            "revision": revision,
        }
        (partial / INFO).write_text(json.dumps(info, indent=2) + "\n")
        partial.chmod(0o700)  # the server secret is in it
        partial.rename(dest / BASE / name)
    archive_now(pg, dest)
    return list_backups(dest)[-1]


def prune(dest: Path, keep: int) -> list[str]:
    """Keep the newest ``keep`` base backups; delete older ones, unfinished
    ones, and the archived WAL that only older ones needed."""
    with _locked(dest):
        backups = list_backups(dest)
        gone = [b.path for b in backups[:-keep]] + list((dest / BASE).glob(".partial-*"))
        for path in gone:
            shutil.rmtree(path)
        kept = backups[-keep:]
        if kept and (dest / WAL).is_dir():
            _run("pg_archivecleanup", str(dest / WAL), kept[0].start_wal)
    return [p.name for p in gone]


# -- the schedule of `keepmem up` --------------------------------------------------------


class Schedule:
    """Takes a base backup whenever the newest is ``backup_every_hours`` old
    (at once when there is none) and prunes to ``backup_keep``, from a
    daemon thread; a failed run is said and tried again in 15 minutes.
    ``keepmem up``'s supervisor keeps the thread running (``alive`` /
    ``restart``). Of ``servers`` (the stack's), the one taking writes is
    backed up: a promoted standby after a failover."""

    name = "backups"

    def __init__(
        self, servers: list[EmbeddedPostgres], data_dir: Path, settings: Settings,
        say: Callable[[str], None],
    ) -> None:  # fmt: skip
        self.remote = None
        if objectstore.is_remote(settings.backup_dir):
            self.remote = objectstore.Remote.of(settings.backup_dir or "", data_dir)
        self.dest = self.remote.spool if self.remote else destination(settings.backup_dir or "")
        self.servers, self.data_dir, self.say = servers, data_dir, say
        self.every = timedelta(hours=settings.backup_every_hours)
        self.keep, self.timeout_s = settings.backup_keep, settings.backup_archive_timeout_seconds
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    def primary(self) -> EmbeddedPostgres:
        for server in self.servers:
            if server.alive() and server.psql("SELECT pg_is_in_recovery()").strip() == "f":
                return server
        raise BackupError("no server of the stack takes writes")

    def due_in(self) -> float:
        """Seconds until the next base backup is due."""
        backups = list_backups(self.dest)
        if not backups:
            return 0.0
        return max((backups[-1].finished + self.every - datetime.now(UTC)).total_seconds(), 0)

    def run_once(self) -> BaseBackup:
        made = take_backup(
            self.primary(), self.dest, data_dir=self.data_dir, archive_timeout_s=self.timeout_s
        )
        pruned = prune(self.dest, self.keep)
        if self.remote is not None:  # (failing: the uploader retries)
            self.remote.sync(keep=self.keep)
        self.say(f"keepmem: backup {made.path.name} taken, {len(pruned)} old one(s) pruned")
        return made

    def _loop(self) -> None:
        # A run cut off when `keepmem up` stops leaves a .partial-* directory
        # that the next prune deletes.
        delay = 0.0
        while not self._stopping.wait(min(delay, 60.0)):
            try:
                if (delay := self.due_in()) <= 0:
                    self.run_once()
            except (EmbeddedError, OSError) as exc:
                self.say(f"keepmem: backup failed ({exc}); trying again in 15 minutes")
                delay = 900.0

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def restart(self) -> None:
        if not self._stopping.is_set():
            self._thread = threading.Thread(target=self._loop, name="keepmem-backups", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 600) -> None:
        """No more runs; waits for one under way."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)


def scheduled(
    settings: Settings, data_dir: Path, primary: EmbeddedPostgres,
    standbys: Sequence[EmbeddedPostgres], say: Callable[[str], None],
) -> list[Schedule | objectstore.Uploader]:  # fmt: skip
    """``keepmem up``'s backups, when ``KEEPMEM_BACKUP_DIR`` is set (else
    none): WAL archiving turned on now, before anything connects (its one
    restart is then free), and the schedule's thread started."""
    if not settings.backup_dir:
        return []
    try:
        schedule = Schedule([primary, *standbys], data_dir, settings, say)
    except BackupError as exc:  # a destination that can never work: refuse to start
        raise SystemExit(f"keepmem: KEEPMEM_BACKUP_DIR: {exc}") from exc
    try:
        if configure_archiving(schedule.primary(), schedule.dest, timeout_s=schedule.timeout_s):
            say("keepmem: WAL archiving turned on (PostgreSQL restarted once)")
    except (EmbeddedError, OSError) as exc:  # (a backup disk not mounted yet: serve anyway)
        say(f"keepmem: WAL archiving is not on ({exc}); the schedule tries again")
    schedule.restart()
    say(f"keepmem: backups to {settings.backup_dir} every {settings.backup_every_hours:g} h")
    if schedule.remote is None:
        return [schedule]
    uploader = objectstore.Uploader(schedule.remote, schedule.keep, say)
    uploader.restart()
    return [schedule, uploader]


# -- the command line ----------------------------------------------------------------------


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``keepmem backup`` and ``keepmem restore``."""
    backup = commands.add_parser("backup", help="base backup + continuous WAL archiving")
    backup.add_argument("--data-dir", help="the embedded stack's directory (default .keepmem)")
    backup.add_argument(
        "--to", help="a directory, file:// or s3:// URL (default KEEPMEM_BACKUP_DIR)"
    )
    backup.add_argument(
        "--keep", type=_count, help="base backups kept (default KEEPMEM_BACKUP_KEEP)"
    )
    backup.set_defaults(func=cmd_backup)
    restore = commands.add_parser("restore", help="restore a backup to a point in time")
    restore.add_argument(
        "--from", dest="source", required=True, help="the backup destination (or s3:// URL)"
    )
    restore.add_argument(
        "--to", dest="time", required=True, help="ISO 8601 time (without a zone: local)"
    )
    restore.add_argument("--into", required=True, help="a new data directory")
    restore.set_defaults(func=objectstore.cmd_restore)


def _count(text: str) -> int:
    if not (text.isascii() and text.isdigit() and 1 <= int(text) <= 1000):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number from 1 to 1000")
    return int(text)


def cmd_backup(args: argparse.Namespace) -> int:
    from app.cli import replication

    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    settings = Settings()
    data_dir = Path(args.data_dir or settings.data_dir).expanduser().resolve()
    if not (args.to or settings.backup_dir):
        say("keepmem: say where: --to DIR (or set KEEPMEM_BACKUP_DIR)")
        return 2
    if not (data_dir / "pg" / "PG_VERSION").exists():
        say(f"keepmem: no embedded stack in {data_dir}; run `keepmem up` first")
        return 1
    timeout_s = settings.backup_archive_timeout_seconds
    where = args.to or settings.backup_dir or ""
    try:
        remote = objectstore.Remote.of(where, data_dir) if objectstore.is_remote(where) else None
        dest = remote.spool if remote else destination(where)
        # (After a failover: the promoted standby, never the old primary.)
        pg = replication.after_failover(data_dir) or EmbeddedPostgres(data_dir)
        pg.start()
        try:
            if configure_archiving(pg, dest, timeout_s=timeout_s):
                say("keepmem: WAL archiving turned on: PostgreSQL restarted once")
            made = take_backup(pg, dest, data_dir=data_dir, archive_timeout_s=timeout_s)
            pruned = prune(dest, args.keep or settings.backup_keep)
            if remote is not None:  # (failing: all stays in the spool, sent by the next run)
                remote.sync(keep=args.keep or settings.backup_keep)
        finally:
            if pg.started_here:
                pg.stop()
    except EmbeddedError as exc:
        say(f"keepmem: {exc}")
        if objectstore.is_remote(where) and (data_dir / objectstore.SPOOL).is_dir():
            say(f"keepmem: {data_dir / objectstore.SPOOL} keeps what is not uploaded yet")
        return 1
    say(f"keepmem: base backup {made.path.name} verified; WAL archived to {where}")
    say(f"keepmem: restorable from {made.finished.isoformat()}; {len(pruned)} old one(s) pruned")
    if pg.started_here:
        say("keepmem: the stack is not running: WAL is archived again once `keepmem up` runs")
    if remote is not None:
        say(f"keepmem: WAL reaches {where} while `keepmem up` runs with KEEPMEM_BACKUP_DIR={where}")
    return 0
