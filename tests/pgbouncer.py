"""A real PgBouncer (Debian's ``pgbouncer`` package; ``make pgbouncer``
installs it) in transaction pooling mode in front of the test stack's
PostgreSQL, with few server connections so that client connections share
them."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from app.cli.embedded import EmbeddedPostgres, free_port


class PgBouncer:
    def __init__(self, pg: EmbeddedPostgres, *, server_connections: int = 2) -> None:
        binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not Path(binary).exists():
            raise RuntimeError("pgbouncer is not installed: run `make pgbouncer` (apt)")
        self.binary, self.pg = binary, pg
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="pgbouncer-"))
        self.server_connections = server_connections
        self.proc: subprocess.Popen[bytes] | None = None

    def _write_config(self, users: list[str]) -> Path:
        (self.dir / "users.txt").write_text("".join(f'"{u}" ""\n' for u in users))
        ini = self.dir / "pgbouncer.ini"
        ini.write_text(
            f"""[databases]
* = host={self.pg.socket_dir} port={self.pg.port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {self.dir / "users.txt"}
pool_mode = transaction
default_pool_size = {self.server_connections}
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = 200
ignore_startup_parameters = extra_float_digits,options
server_reset_query =
logfile = {self.dir / "pgbouncer.log"}
pidfile = {self.dir / "pgbouncer.pid"}
"""
        )
        return ini

    def start(self, users: list[str]) -> None:
        ini = self._write_config(users)
        command = [self.binary, str(ini)]
        account = self.pg.system_user if os.geteuid() == 0 else None
        if account is not None:  # PgBouncer refuses to run as root
            entry = pwd.getpwnam(account)
            for path in [self.dir, *self.dir.iterdir()]:
                os.chown(path, entry.pw_uid, entry.pw_gid)
            command = [self.binary, "-u", account, str(ini)]
        self.proc = subprocess.Popen(command, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pgbouncer exited: {self.log()}")
            try:
                import socket

                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"pgbouncer did not listen: {self.log()}")

    def log(self) -> str:
        path = self.dir / "pgbouncer.log"
        return path.read_text()[-3000:] if path.exists() else ""

    def url(self, user: str, database: str = "postgres") -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)
