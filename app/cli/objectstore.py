"""Backups to an object store (``s3://bucket/prefix``, any S3-compatible
service): ``keepmem backup --to s3://...``, ``keepmem up``'s schedule and
``keepmem restore --from s3://...``.

Why a spool: the directory code (``app.cli.backup``) stays the one way
backups are made. The server archives WAL into a local spool directory
(``<data-dir>/backup-spool``, laid out as any destination) and base
backups are written there; this module mirrors the spool to the bucket,
with the same layout under the prefix. What is uploaded leaves the spool:
WAL segments are deleted, base backups are cut to their ``keepmem.json``
and a marker (the schedule reads their times; a backup's bytes are not
kept twice on the database's disk). An upload that fails leaves the spool
as it was and is tried again: nothing is deleted before the store holds it.

The store is configured the usual way: ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, ``AWS_ENDPOINT_URL`` (another
S3-compatible service) and ``AWS_ALLOW_HTTP=true`` (an endpoint without
TLS), read by the S3 client itself (obstore).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import functools
import os
import re
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from app.cli.embedded import give_to_server
from app.cli.restore import BASE, INFO, WAL, BackupError, list_backups
from app.cli.restore import cmd_restore as restore_from_directory

if TYPE_CHECKING:
    from obstore.store import S3Store

T = TypeVar("T")
SPOOL = "backup-spool"
UPLOADED = ".uploaded"  # in a spool's base backup: the store holds all of it
# What the server archives; basic_archive's temporary files are not among them.
_WAL_NAME = re.compile(r"[0-9A-F]{24}(\.partial|\.[0-9A-F]{8}\.backup)?|[0-9A-F]{8}\.history")


def is_remote(text: str | None) -> bool:
    return bool(text) and str(text).startswith("s3://")


def _errors() -> tuple[type[BaseException], ...]:
    from obstore.exceptions import BaseError

    return (BaseError, OSError)


class Remote:
    """A bucket prefix and the spool mirrored to it."""

    def __init__(self, url: str, spool: Path, *, retry_timeout_s: float = 120) -> None:
        from obstore.store import S3Store

        if not re.fullmatch(r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?", url):
            raise BackupError(f"{url!r} is not s3://bucket or s3://bucket/prefix")
        try:
            self.store: S3Store = S3Store.from_url(
                url.rstrip("/"),
                retry_config={
                    "max_retries": 10,
                    "retry_timeout": timedelta(seconds=retry_timeout_s),
                },
            )
        except _errors() as exc:
            raise BackupError(f"{url}: {exc}") from exc
        self.url, self.spool = url.rstrip("/"), spool
        self._retained: tuple[set[str], int] | None = None

    @classmethod
    def of(cls, url: str, data_dir: Path) -> Remote:
        """The store of ``url`` with the stack's spool."""
        return cls(url, data_dir / SPOOL)

    def _call(self, what: str, action: Callable[[], T]) -> T:
        try:
            return action()
        except _errors() as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise BackupError(f"{self.url}: {what} failed ({first})") from exc

    def _put(self, key: str, path: Path) -> None:
        import obstore

        self._call(f"upload of {key}", lambda: obstore.put(self.store, key, path))

    def keys(self, prefix: str) -> dict[str, object]:
        """The objects under ``prefix`` (their keys, to their last-modified times)."""
        import obstore

        def listing() -> dict[str, object]:
            found: dict[str, object] = {}
            for batch in obstore.list(self.store, prefix):
                found.update((m["path"], m["last_modified"]) for m in batch)
            return found

        return self._call(f"listing {prefix}", listing)

    def download(self, key: str, to: Path) -> None:
        import obstore

        def get() -> None:
            to.parent.mkdir(parents=True, exist_ok=True)
            result = obstore.get(self.store, key)
            with open(to, "wb") as out:
                for chunk in result.stream():
                    out.write(chunk)
            stamp = result.meta["last_modified"].timestamp()
            os.utime(to, (stamp, stamp))  # (restore reads the archive's reach from it)

        self._call(f"download of {key}", get)

    # -- upload --------------------------------------------------------------------------

    def sync(self, *, keep: int | None = None) -> int:
        """Upload what the spool holds that the store lacks, oldest WAL first,
        then base backups (``keepmem.json`` last: a base backup without it
        is unfinished, in the store as in a directory). With ``keep``, the
        store's base backups are pruned as ``prune`` prunes a directory.
        Returns the number of files uploaded."""
        with self._upload_lock():
            sent = self._sync_wal()
            for each in list_backups(self.spool):
                if not each.path.name.startswith("."):  # (one being renamed into place)
                    sent += self._sync_base(each.path)
            if keep is not None and self._retained != (self._local_names(), keep):
                self._retain(keep)
                self._retained = (self._local_names(), keep)
            return sent

    @contextlib.contextmanager
    def _upload_lock(self) -> Iterator[None]:
        """One uploader at a time (``keepmem up``'s and ``keepmem backup``'s)."""
        self.spool.mkdir(parents=True, exist_ok=True)
        with open(self.spool / "upload.lock", "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            yield

    def _local_names(self) -> set[str]:
        return {b.path.name for b in list_backups(self.spool)}

    def _sync_wal(self) -> int:
        wal = self.spool / WAL
        names = sorted(p.name for p in wal.glob("*") if _WAL_NAME.fullmatch(p.name))
        for name in names:
            with contextlib.suppress(FileNotFoundError):  # (pruned meanwhile)
                self._put(f"{WAL}/{name}", wal / name)
            (wal / name).unlink(missing_ok=True)
        return len(names)

    def _sync_base(self, path: Path) -> int:
        sent = 0
        if not (path / UPLOADED).exists():
            files = sorted(p for p in path.iterdir() if p.is_file() and p.name != INFO)
            for each in [*files, path / INFO]:
                self._put(f"{BASE}/{path.name}/{each.name}", each)
                sent += 1
            (path / UPLOADED).touch()
        for each in path.iterdir():  # (also what an interrupted cut left)
            if each.name not in (INFO, UPLOADED):
                shutil.rmtree(each) if each.is_dir() else each.unlink()
        return sent

    def _retain(self, keep: int) -> None:
        """The store's newest ``keep`` base backups kept (decided from the
        store's own, not the spool's: a lost spool must not empty the
        bucket), and the WAL that only older ones needed deleted."""
        import obstore

        stored = self.keys(BASE)
        with tempfile.TemporaryDirectory() as tmp:
            for key in stored:
                if key.endswith(f"/{INFO}"):
                    self.download(key, Path(tmp) / key)
            backups = list_backups(Path(tmp))
        gone = {b.path.name for b in backups[:-keep]}
        doomed = [k for k in stored if k.split("/")[1] in gone]
        # Their keepmem.json first: an interrupted prune leaves unfinished ones.
        doomed.sort(key=lambda k: not k.endswith(f"/{INFO}"))
        kept = backups[-keep:]
        if kept:
            oldest = kept[0].start_wal[8:]
            doomed += [
                key
                for key in self.keys(WAL)
                if _WAL_NAME.fullmatch(name := key.split("/")[-1])
                and not name.endswith(".history")
                and name[8:24] < oldest
            ]
        for key in doomed:
            self._call(f"deleting {key}", functools.partial(obstore.delete, self.store, key))


# -- restore -------------------------------------------------------------------------------


def fetch(remote: Remote, target: datetime, where: Path, say: Callable[[str], None]) -> Path:
    """Download into ``where`` what a restore to ``target`` reads, as a
    directory destination: every base backup's ``keepmem.json`` (the
    restore's choice and checks read them), all of the base backup it
    will choose (the newest finished by ``target``), and the archived WAL
    from that backup's start on (history files too). Older WAL and other
    base backups stay in the store."""
    stored = remote.keys(BASE)
    for key in stored:
        if key.endswith(f"/{INFO}"):
            remote.download(key, where / key)
    chosen = [b for b in list_backups(where) if b.finished <= target]
    if chosen:
        base = chosen[-1]
        for key in stored:
            if key.split("/")[1] == base.path.name and not key.endswith(f"/{INFO}"):
                remote.download(key, where / key)
        wal = {
            key: name
            for key in remote.keys(WAL)
            if _WAL_NAME.fullmatch(name := key.split("/")[-1])
            and (name.endswith(".history") or name[8:24] >= base.start_wal[8:])
        }
        for key in sorted(wal):
            remote.download(key, where / WAL / wal[key])
        say(f"keepmem: downloaded base backup {base.path.name} and {len(wal)} WAL file(s)")
    (where / WAL).mkdir(parents=True, exist_ok=True)
    give_to_server(where)  # (the server's restore_command reads the WAL)
    return where


def cmd_restore(args: argparse.Namespace) -> int:
    """``keepmem restore``: from an ``s3://`` URL, what the restore needs is
    downloaded next to ``--into`` first, then restored as from a directory."""
    if not is_remote(args.source):
        return restore_from_directory(args)
    try:
        target = datetime.fromisoformat(args.time).astimezone(UTC)
    except ValueError:
        return restore_from_directory(args)  # (it says what is wrong)
    into = Path(args.into).expanduser().resolve()
    into.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{into.name}-download-", dir=into.parent) as tmp:
        try:
            remote = Remote(args.source, Path(tmp) / "unused-spool")
            fetch(remote, target, Path(tmp) / "backup", say=_say)
        except BackupError as exc:
            _say(f"keepmem: {exc}")
            return 1
        local = argparse.Namespace(**{**vars(args), "source": str(Path(tmp) / "backup")})
        return restore_from_directory(local)


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class Uploader:
    """``keepmem up``'s part that sends the spool to the store every few
    seconds (WAL as the server archives it, base backups the schedule
    took); an unreachable store is said once, retried, and its recovery
    said. The supervisor keeps the thread running."""

    name = "backup-uploads"

    def __init__(
        self, remote: Remote, keep: int, say: Callable[[str], None], every_s: float = 5.0
    ) -> None:
        self.remote, self.keep, self.say, self.every_s = remote, keep, say, every_s
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    def _loop(self) -> None:
        failing = False
        delay = 0.0
        while not self._stopping.wait(delay):
            try:
                self.remote.sync(keep=self.keep)
                if failing:
                    self.say(f"keepmem: uploads to {self.remote.url} work again")
                failing, delay = False, self.every_s
            except BackupError as exc:
                if not failing:
                    self.say(f"keepmem: {exc}; the spool keeps everything, retrying")
                failing, delay = True, min(max(delay * 2, self.every_s), 60.0)

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def restart(self) -> None:
        if not self._stopping.is_set():
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 600) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)
