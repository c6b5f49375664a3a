"""The ``keepmem`` command: up (embedded stack), serve, worker, migrate, admin."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from app import __version__, tenancy
from app.cli import backup, process, replication
from app.cli.serving import METRICS_DIR
from app.cli.serving import server_config as server_config  # (tests serve with it)
from app.settings import Settings

T = TypeVar("T")


def _eprint(*args: Any) -> None:
    print(*args, file=sys.stderr, flush=True)


def _print_exports(url: str, key: str | None) -> None:
    print(f"export KEEPMEM_URL={url}", flush=True)
    if key:
        print(f"export KEEPMEM_API_KEY={key}", flush=True)
    print(
        "# for the keep CLI: export KEEPNOTES_API_URL=$KEEPMEM_URL "
        "KEEPNOTES_API_KEY=$KEEPMEM_API_KEY",
        flush=True,
    )


# -- embedded plumbing shared by `up` and `admin` -----------------------------------


class _Embedded:
    """Start (or attach to) the embedded PostgreSQL of a data directory."""

    def __init__(self, data_dir: Path) -> None:
        from app.cli.embedded import EmbeddedPostgres

        self.data_dir = data_dir
        self.pg = EmbeddedPostgres(data_dir)
        self.standbys: list[replication.Standby] = []

    def start_database(
        self, settings: Settings, *, replicas: int = 0, synchronous: bool = False
    ) -> Settings:
        from app.cli import migrate

        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.pg = replication.after_failover(self.data_dir) or self.pg
        self.pg.start()
        self.pg.ensure_login_role(settings.app_role)
        migrate.upgrade(self.pg.url("postgres"), settings.app_role)
        self.standbys = replication.start_standbys(self.pg, self.data_dir, replicas, synchronous)
        return settings.model_copy(
            update=replication.urls(self.pg, self.standbys, settings.app_role)
        )


def _run(coro_fn: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await coro_fn()

    return asyncio.run(main())


async def _create_tenant(settings: Settings, name: str) -> tuple[str, str]:
    from app.accounts import service
    from app.db import Database

    assert settings.secret_key is not None
    db = Database(settings.database_url or "", pgbouncer=settings.db_pgbouncer)
    try:
        async with tenancy.system_transaction(db) as session:
            new = await service.create_tenant(
                session,
                name=name,
                server_secret=settings.secret_key.get_secret_value(),
                actor="cli",
            )
            return str(new.tenant.id), new.key.secret
    finally:
        await db.dispose()


async def _seed_projects(settings: Settings) -> int:
    from app.accounts import service
    from app.db import Database

    db = Database(settings.database_url or "", pgbouncer=settings.db_pgbouncer)
    try:
        async with tenancy.system_transaction(db) as session:
            return await service.seed_every_project(session)
    finally:
        await db.dispose()


async def _tenant_count(settings: Settings) -> int:
    from app.db import Database
    from app.tenants import service

    db = Database(settings.database_url or "", pgbouncer=settings.db_pgbouncer)
    try:
        async with tenancy.system_transaction(db) as session:
            return len(await service.list_tenants(session))
    finally:
        await db.dispose()


# -- up ------------------------------------------------------------------------------


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def cmd_up(args: argparse.Namespace) -> int:
    from app.cli.embedded import (
        DataDirLock,
        EmbeddedError,
        EmbeddedRedis,
        check_installed,
        load_secrets,
    )

    # SIGTERM (docker stop, systemd, kill) stops the stack like Ctrl-C does:
    # uvicorn re-raises the signal after its own shutdown, and the default
    # SIGTERM action would skip stopping Postgres, Redis and the worker.
    # SIGINT is set as well: a shell that starts a program in the background
    # (CI, nohup) leaves SIGINT ignored for it, and Ctrl-C then stopped nothing.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)

    base = Settings()
    data_dir = Path(args.data_dir or base.data_dir).expanduser().resolve()
    urls = {"PostgreSQL": base.database_url, "Redis": base.redis_url}
    from app.providers.factory import missing_model_wheels, model_wheels_hint

    # Everything this install lacks, said at once, before anything starts.
    problems = [model_wheels_hint(models)] if (models := missing_model_wheels(base)) else []
    try:
        check_installed(*(server for server, url in urls.items() if not url))
    except EmbeddedError as exc:
        problems.append(str(exc))
    try:
        if problems:
            raise EmbeddedError("\nkeepmem: ".join(problems))
        data_dir.mkdir(parents=True, exist_ok=True)
        lock = DataDirLock(data_dir)
        lock.acquire()
    except EmbeddedError as exc:
        _eprint(f"keepmem: {exc}")
        return 1
    t0 = time.monotonic()
    secrets_ = load_secrets(data_dir, create=True)
    settings = base.model_copy(
        update={
            "secret_key": base.secret_key or _secret(secrets_.secret_key),
            "admin_token": base.admin_token or _secret(secrets_.admin_token),
            "data_dir": str(data_dir),
        }
    )
    from app.cli.supervisor import ChildProcess, Part, Supervisor

    embedded: _Embedded | None = None
    redis: EmbeddedRedis | None = None
    worker: ChildProcess | None = None
    supervisor: Supervisor | None = None
    try:
        if settings.database_url:
            from app.cli import migrate

            migrate.upgrade(settings.effective_owner_url or "", settings.app_role)
        else:
            embedded = _Embedded(data_dir)
            settings = embedded.start_database(
                settings, replicas=args.replicas, synchronous=args.synchronous_standby
            )
        seeded = _run(lambda: _seed_projects(settings))
        if seeded:
            _eprint(f"keepmem: {seeded} schema docs added to existing projects")
        _eprint(f"keepmem: database ready ({time.monotonic() - t0:.1f}s)")
        if not settings.redis_url:
            redis = EmbeddedRedis(data_dir)
            redis.start()
            settings = settings.model_copy(update={"redis_url": redis.url})
        _eprint(f"keepmem: redis ready ({time.monotonic() - t0:.1f}s)")
        key = None
        if _run(lambda: _tenant_count(settings)) == 0:
            _, key = _run(lambda: _create_tenant(settings, "default"))
        env = {**os.environ, **_env_of(settings)}
        env.pop(METRICS_DIR, None)  # the API processes' (the worker serves its own)
        worker = ChildProcess("worker", [sys.executable, "-m", "worker"], env)
        worker.start()
        # Everything this command started is restarted when it dies.
        parts: list[Part] = [worker]
        if embedded is not None:
            parts += replication.supervised(embedded.pg, data_dir, embedded.standbys, _eprint)
            parts += backup.scheduled(settings, data_dir, embedded.pg, embedded.standbys, _eprint)
        parts += [redis] if redis is not None else []
        supervisor = Supervisor(parts, say=_eprint)
        supervisor.start()
        return _serve(
            settings,
            args.host or settings.host,
            args.port or settings.port,
            workers=args.workers or settings.api_workers,
            key=key,
            started=t0,
            data_dir=data_dir,
            # A Ctrl-C reaches Redis and the worker too: they are not
            # restarted while the API processes finish their requests.
            stopping=supervisor.stop,
        )
    finally:
        if supervisor is not None:
            supervisor.stop()
        if worker is not None:
            worker.stop()
        if redis is not None:
            redis.stop()
        if embedded is not None:
            replication.stop(embedded.pg, embedded.standbys)
        lock.release()
        _eprint("keepmem: stopped")


def _secret(value: str) -> Any:
    from pydantic import SecretStr

    return SecretStr(value)


def _env_of(settings: Settings) -> dict[str, str]:
    """Settings as KEEPMEM_* variables, for the worker process."""
    env: dict[str, str] = {}
    for name in ("database_url", "owner_database_url", "redis_url", "app_role", "data_dir"):
        value = getattr(settings, name)
        if value:
            env[f"KEEPMEM_{name.upper()}"] = str(value)
    for name in ("secret_key", "admin_token"):
        secret = getattr(settings, name)
        if secret is not None:
            env[f"KEEPMEM_{name.upper()}"] = secret.get_secret_value()
    if settings.database_replica_urls:
        env["KEEPMEM_DATABASE_REPLICA_URLS"] = ",".join(settings.database_replica_urls)
    return env


def _serve(
    settings: Settings,
    host: str,
    port: int,
    *,
    workers: int,
    key: str | None = None,
    started: float | None = None,
    data_dir: Path | None = None,
    stopping: Callable[[], None] = lambda: None,
) -> int:
    """Serve the API (``workers`` processes); what is said and recorded once
    it serves is said and recorded here, once, whatever their number.
    ``stopping`` is called when several start to stop."""
    from app.cli import serving

    url = f"http://{host}:{port}"

    def on_started() -> None:
        if started is not None:
            several = f"{workers} API processes, " if workers > 1 else ""
            _eprint(
                f"keepmem: serving on {url} ({several}ready in "
                f"{time.monotonic() - started:.1f}s); Ctrl-C stops"
            )
            _eprint(f"keepmem: dashboard at {url}/ui")
        if data_dir is not None:
            from app.cli.embedded import record_url

            record_url(data_dir, url)
            _eprint(f"keepmem: admin token in {data_dir / 'secrets.json'}")
        _print_exports(url, key)

    if workers == 1:
        return serving.serve_here(settings, host, port, on_started=on_started)
    say = _eprint if data_dir is not None else None  # `serve` logs (JSON lines)
    return serving.serve_processes(
        settings, host, port, workers, on_started=on_started, stopping=stopping, say=say
    )


# -- serve / worker / migrate -------------------------------------------------------


def cmd_serve(args: argparse.Namespace) -> int:
    settings = Settings()
    if missing := settings.unset("database_url", "secret_key"):
        # (Redis may be absent: background work then waits in the outbox.)
        _eprint(f"keepmem serve: set {' and '.join(missing)} (or run `keepmem up`)")
        return 2
    return _serve(
        settings,
        args.host or settings.host,
        args.port or settings.port,
        workers=args.workers or settings.api_workers,
    )


def cmd_worker(_: argparse.Namespace) -> int:
    # The worker is its own program (app never imports worker): replace this process.
    os.execv(sys.executable, [sys.executable, "-m", "worker"])


def cmd_migrate(args: argparse.Namespace) -> int:
    from app.cli import migrate

    settings = Settings()
    url = settings.effective_owner_url
    if not url:
        _eprint("keepmem: set KEEPMEM_OWNER_DATABASE_URL (or KEEPMEM_DATABASE_URL)")
        return 2
    migrate.upgrade(url, settings.app_role, args.revision)
    if settings.app_role_password is not None:
        migrate.set_app_login(url, settings.app_role, settings.app_role_password.get_secret_value())
    _eprint(f"keepmem: migrated to {args.revision}")
    if settings.database_url and args.revision == "head":
        seeded = _run(lambda: _seed_projects(settings))
        _eprint(f"keepmem: {seeded} of keep's schema docs added to existing projects")
    return 0


# -- admin ----------------------------------------------------------------------------


def _admin_settings(args: argparse.Namespace) -> tuple[Settings, _Embedded | None]:
    """External database when KEEPMEM_DATABASE_URL is set, else the embedded one."""
    settings = Settings()
    if settings.database_url:
        if settings.secret_key is None:
            raise SystemExit("keepmem: KEEPMEM_SECRET_KEY must be set with KEEPMEM_DATABASE_URL")
        return settings, None
    from app.cli.embedded import EmbeddedError, check_installed, load_secrets

    data_dir = Path(args.data_dir or settings.data_dir).expanduser().resolve()
    try:
        check_installed("PostgreSQL")
    except EmbeddedError as exc:
        raise SystemExit(f"keepmem: {exc}") from exc
    if not (data_dir / "pg").exists():
        raise SystemExit(f"keepmem: no embedded stack in {data_dir}; run `keepmem up` first")
    secrets_ = load_secrets(data_dir, create=False)
    embedded = _Embedded(data_dir)
    settings = embedded.start_database(
        settings.model_copy(update={"secret_key": _secret(secrets_.secret_key)})
    )
    return settings, embedded


def _service_url(embedded: _Embedded | None, settings: Settings) -> str:
    """Where a new tenant's clients go: where the embedded stack of the data
    directory serves (``keepmem up`` records it), else the configured host
    and port."""
    if embedded is not None:
        from app.cli.embedded import recorded_url

        if url := recorded_url(embedded.data_dir):
            return url
    return f"http://{settings.host}:{settings.port}"


def cmd_admin(args: argparse.Namespace) -> int:
    import json

    from app.accounts import service as accounts
    from app.auth import service as auth_service
    from app.db import Database
    from app.tenants import service as tenants

    settings, embedded = _admin_settings(args)
    try:
        if args.admin_command == "create-tenant":
            _, key = _run(lambda: _create_tenant(settings, args.name))
            _print_exports(args.url or _service_url(embedded, settings), key)
            return 0

        async def run() -> Any:
            db = Database(settings.database_url or "", pgbouncer=settings.db_pgbouncer)
            try:
                async with tenancy.system_transaction(db) as session:
                    if args.admin_command == "list-tenants":
                        rows = await tenants.list_tenants(session)
                        return [
                            {
                                "id": str(t.id),
                                "name": t.name,
                                "created_at": t.created_at.isoformat(),
                            }
                            for t in rows
                        ]
                    if args.admin_command == "rotate-signing-key":
                        from app.oauth.keyring import Keyring

                        assert settings.secret_key is not None
                        keyring = Keyring(
                            settings.secret_key.get_secret_value(),
                            access_ttl_s=settings.oauth_access_token_seconds,
                        )
                        return {"kid": await keyring.rotate(session), "retired": "all others"}
                    tenant = await tenants.get_tenant_by_name(session, args.tenant)
                    if args.admin_command == "set-quota":
                        # Only the quotas given change (as the API's PUT does).
                        changes = {n: getattr(args, n) for n in tenants.QUOTAS if hasattr(args, n)}
                        await tenants.set_quotas(session, tenant.id, changes, actor="cli")
                        return await accounts.usage_of(session, tenant.id, None)
                    if args.admin_command == "usage":
                        return await accounts.usage_of(session, tenant.id, None)
                    if args.admin_command == "rechunk":
                        return await accounts.rechunk(
                            session,
                            tenant.id,
                            project=args.project,
                            min_chars=settings.chunk_min_chars,
                        )
                    if args.admin_command == "erase-tenant":
                        if not args.yes:
                            raise SystemExit(
                                "keepmem: erasing a tenant cannot be undone; add --yes"
                            )
                        from app.erasure import service as erasure

                        await erasure.erase_tenant(session, tenant.id, actor="cli")
                        return {"erased": str(tenant.id)}
                    if args.admin_command == "list-keys":
                        keys = await auth_service.list_keys(session, tenant_id=tenant.id)
                        return [
                            {
                                "id": str(k.id),
                                "name": k.name,
                                "prefix": k.prefix,
                                "scopes": k.scopes,
                                "revoked": k.revoked_at is not None,
                            }
                            for k in keys
                        ]
                    if args.admin_command == "create-key":
                        assert settings.secret_key is not None
                        new = await auth_service.create_key(
                            session,
                            tenant_id=tenant.id,
                            name=args.name,
                            scopes=args.scopes.split(","),
                            expires_at=None,
                            server_secret=settings.secret_key.get_secret_value(),
                            actor="cli",
                        )
                        return {"id": str(new.row.id), "key": new.secret}
                    import uuid

                    row = await auth_service.revoke_key(
                        session, tenant_id=tenant.id, key_id=uuid.UUID(args.key_id), actor="cli"
                    )
                    return {"id": str(row.id), "revoked": True}
            finally:
                await db.dispose()

        print(json.dumps(_run(run), indent=2))
        return 0
    finally:
        if embedded is not None and embedded.pg.started_here:
            embedded.pg.stop()


def _quota(text: str) -> int | None:
    """A quota on the command line: a whole number (0 allows nothing) or
    ``none`` (unlimited)."""
    if text.strip().lower() in ("none", "null", "unlimited"):
        return None
    digits = text.strip()
    if not (digits.isascii() and digits.isdigit() and int(digits) <= 10**15):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (to 10^15) or 'none'")
    return int(digits)


WORKERS_HELP = (
    "API processes sharing the port (default KEEPMEM_API_WORKERS: one per usable core, "
    "at most 4; 1 serves from this process)"
)


def _workers(text: str) -> int:
    if not (text.isascii() and text.isdigit() and 1 <= int(text) <= 64):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of processes from 1 to 64")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="keepmem", description=__doc__)
    parser.add_argument("--version", action="version", version=f"keepmem {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="run the embedded stack: Postgres, Redis, API and worker")
    up.add_argument("--data-dir", help="where data lives (default .keepmem)")
    up.add_argument("--host", help="bind address (default 127.0.0.1)")
    up.add_argument("--port", type=int, help="port (default 8765)")
    up.add_argument("--workers", type=_workers, help=WORKERS_HELP)
    up.set_defaults(func=cmd_up)
    replication.add_arguments(up, sub)
    backup.add_commands(sub)

    serve = sub.add_parser("serve", help="run the API against KEEPMEM_DATABASE_URL")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--workers", type=_workers, help=WORKERS_HELP)
    serve.set_defaults(func=cmd_serve)

    sub.add_parser("worker", help="run an ARQ worker").set_defaults(func=cmd_worker)

    mig = sub.add_parser("migrate", help="apply migrations with the owner URL")
    mig.add_argument("revision", nargs="?", default="head")
    mig.set_defaults(func=cmd_migrate)

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--data-dir",
        help="embedded stack directory (default .keepmem); "
        "ignored when KEEPMEM_DATABASE_URL is set",
    )
    admin = sub.add_parser("admin", help="tenants and keys")
    admin_sub = admin.add_subparsers(dest="admin_command", required=True)
    ct = admin_sub.add_parser(
        "create-tenant", parents=[common], help="create a tenant and print its first key"
    )
    ct.add_argument("name")
    ct.add_argument("--url", help="service URL to print in the export line")
    admin_sub.add_parser("list-tenants", parents=[common])
    lk = admin_sub.add_parser("list-keys", parents=[common])
    lk.add_argument("tenant", help="tenant name")
    ck = admin_sub.add_parser("create-key", parents=[common])
    ck.add_argument("tenant", help="tenant name")
    ck.add_argument("--name", default="cli")
    ck.add_argument("--scopes", default="read,write")
    rk = admin_sub.add_parser("revoke-key", parents=[common])
    rk.add_argument("tenant", help="tenant name")
    rk.add_argument("key_id")
    sq = admin_sub.add_parser(
        "set-quota",
        parents=[common],
        help="change a tenant's quotas: N (0 allows nothing) or none (unlimited); "
        "quotas not given stay as they are",
    )
    sq.add_argument("tenant", help="tenant name")
    for name in ("notes", "bytes", "requests_per_day", "jobs_per_day"):
        sq.add_argument(
            f"--{name.replace('_', '-')}",
            dest=name,
            type=_quota,
            default=argparse.SUPPRESS,
            metavar="N|none",
        )
    rc = admin_sub.add_parser(
        "rechunk",
        parents=[common],
        help="cut a tenant's long notes into passages again (those whose text is held or "
        "kept), through the worker",
    )
    rc.add_argument("tenant", help="tenant name")
    rc.add_argument("--project", help="one project's slug (default: every project)")
    us = admin_sub.add_parser("usage", parents=[common], help="a tenant's usage and quotas")
    us.add_argument("tenant", help="tenant name")
    et = admin_sub.add_parser(
        "erase-tenant", parents=[common], help="erase a tenant and everything it holds"
    )
    et.add_argument("tenant", help="tenant name")
    et.add_argument("--yes", action="store_true", help="confirm: this cannot be undone")
    admin_sub.add_parser(
        "rotate-signing-key",
        parents=[common],
        help="new OAuth token-signing key; the old ones verify for one token lifetime more",
    )
    admin.set_defaults(func=cmd_admin)
    return parser


def main(argv: list[str] | None = None) -> None:
    process.limit_malloc_arenas()  # before any thread starts
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)
    except KeyboardInterrupt:
        # Ctrl-C / SIGTERM is how `up` and `serve` are meant to stop; by the
        # time it reaches here every component has been shut down in order.
        code = 0
    raise SystemExit(code)
