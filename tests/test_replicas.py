"""Read replicas with read-your-writes (app.replicas), against a real
streaming standby of a primary of this module's own.

The primary and its standby are this module's (the suite's PostgreSQL is
never reconfigured); Redis is the suite's. Each app under test is served
by uvicorn in a thread (``serving``), the way ``keepmem serve`` runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from keepmem_client import Keepmem, NotFoundError
from keepmem_client._base import Consistency
from pydantic import SecretStr

from app import tenancy
from app.accounts import service as accounts
from app.cli import migrate, replication
from app.cli.embedded import SUPERUSER, EmbeddedError, EmbeddedPostgres
from app.cli.replication import Standby
from app.db import Database, lsn_text, parse_lsn
from app.main import create_app
from app.metrics import REGISTRY
from app.replicas import HEADER
from app.settings import Settings
from tests.conftest import ADMIN_TOKEN, APP_ROLE, SECRET, Stack, serving

# -- a primary and a streaming standby of this module's own ------------------------


def psql_on(server: EmbeddedPostgres, sql: str) -> str:
    return server.psql(sql, database="keepmem").strip()


def wait_streaming(standby: Standby) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(EmbeddedError):
            if psql_on(standby, "SELECT status FROM pg_stat_wal_receiver") == "streaming":
                return
        time.sleep(0.1)
    raise AssertionError("the standby does not stream")


def kill(server: EmbeddedPostgres) -> None:
    """kill -9 of its postmaster, returning once it is gone."""
    pid = server.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def restart(standby: Standby) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:  # a killed postmaster's backends may hold its shared memory a moment
            standby.start()
            break
        except EmbeddedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    wait_streaming(standby)


@dataclass
class Cluster:
    primary: EmbeddedPostgres
    standby: Standby
    redis_url: str

    def settings(self, **overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "database_url": self.primary.url(APP_ROLE),
            "owner_database_url": self.primary.url(SUPERUSER),
            "database_replica_urls": [self.standby.url(APP_ROLE)],
            "redis_url": self.redis_url,
            "secret_key": SecretStr(SECRET),
            "admin_token": SecretStr(ADMIN_TOKEN),
            "rate_limit_per_minute": 0,
            "auth_failures_per_minute": 0,
            "oauth_registrations_per_minute": 0,
            "api_workers": 1,
            **overrides,
        }
        return Settings(**values)

    def new_key(self) -> str:
        async def make() -> str:
            db = Database(self.primary.url(APP_ROLE))
            try:
                async with tenancy.system_transaction(db) as session:
                    made = await accounts.create_tenant(
                        session, name=f"r-{uuid.uuid4().hex[:12]}", server_secret=SECRET
                    )
                    return made.key.secret
            finally:
                await db.dispose()

        return asyncio.run(make())

    def wait_replayed(self) -> None:
        """Until the standby has everything the primary has now."""
        replication.wait_for_replay(self.standby, replication.wal_insert_lsn(self.primary))


@pytest.fixture(scope="module")
def cluster(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("replicas")
    primary = EmbeddedPostgres(root)
    primary.start()
    primary.ensure_login_role(APP_ROLE)
    migrate.upgrade(primary.url(SUPERUSER), APP_ROLE)
    replication.configure_primary(primary)
    standby = replication.make_standby(primary, root, name="replica-1")
    wait_streaming(standby)
    try:
        yield Cluster(primary, standby, stack.redis.url)
    finally:
        standby.stop()
        primary.stop()


@contextlib.contextmanager
def served(cluster: Cluster, **overrides: Any) -> Iterator[str]:
    with serving(create_app(cluster.settings(**overrides))) as url:
        yield url


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def reads(served_by: str) -> float:
    return sample("keepmem_reads_total", served_by=served_by)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def in_rotation() -> float:
    return sample("keepmem_replica_in_rotation", replica="replica0")


@contextlib.contextmanager
def replay_paused(cluster: Cluster) -> Iterator[None]:
    psql_on(cluster.standby, "SELECT pg_wal_replay_pause()")
    try:
        yield
    finally:
        psql_on(cluster.standby, "SELECT pg_wal_replay_resume()")


# -- without replicas: nothing changes ----------------------------------------------


async def test_without_replicas_a_write_carries_no_token(client: httpx.AsyncClient, tenant) -> None:  # type: ignore[no-untyped-def]
    r = await client.post("/v1/notes", json={"content": "plain"}, headers=tenant.headers)
    assert r.status_code in (200, 201), r.text
    assert HEADER.lower() not in {k.lower() for k in r.headers}


def test_replica_urls_split_on_schemes_only() -> None:
    multi = "postgresql://u@h1:5432,h2:5432/db?target_session_attrs=read-write"
    s = Settings(database_replica_urls=f"{multi}, postgresql://u@h3/db")  # type: ignore[arg-type]
    assert s.database_replica_urls == [multi, "postgresql://u@h3/db"]


def test_lsn_text_round_trips() -> None:
    assert parse_lsn("16/B374D848") == (0x16 << 32) | 0xB374D848
    assert lsn_text((0x16 << 32) | 0xB374D848) == "16/B374D848"
    assert parse_lsn("nonsense") is None and parse_lsn("1/") is None


def test_the_sdk_keeps_the_newest_token_and_sends_it() -> None:
    seen: list[str | None] = []
    answers = iter(["0/200", "0/100", None, "1/0", None])

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get(HEADER))
        token = next(answers)
        return httpx.Response(200, json={}, headers={HEADER: token} if token else {})

    kept = Consistency()
    with httpx.Client(transport=httpx.MockTransport(handler), event_hooks=kept.hooks()) as http:
        for _ in range(4):
            http.get("http://x/")
        http.get("http://x/", headers={HEADER: "0/1"})  # a caller's own wins
    assert seen == [None, "0/200", "0/200", "0/200", "0/1"]
    assert kept.token == "1/0"


# -- read routing and read-your-writes ----------------------------------------------


def test_reads_go_to_the_replica_writes_to_the_primary(cluster: Cluster) -> None:
    key, other = cluster.new_key(), cluster.new_key()
    with served(cluster) as url, Keepmem(url, key) as km, Keepmem(url, other) as stranger:
        stranger.put("the other tenant's", id="mine")  # its project, made on the primary
        before = reads("replica")
        km.put("kept on the primary", id="n1")
        assert km.consistency.token is not None and parse_lsn(km.consistency.token)
        assert km.get("n1").summary == "kept on the primary"
        assert [n.id for n in km.list()] == ["n1"]
        assert reads("replica") == before + 2
        # row-level security applies on the replica as on the primary
        with pytest.raises(NotFoundError):
            stranger.get("n1")
        assert [n.id for n in stranger.list()] == ["mine"]
        assert reads("replica") == before + 4


def test_a_token_read_is_not_served_by_a_replica_that_lacks_the_write(cluster: Cluster) -> None:
    key = cluster.new_key()
    with served(cluster, replica_max_lag_seconds=300) as url, Keepmem(url, key) as km:
        km.put("before", id="n")
        cluster.wait_replayed()
        with replay_paused(cluster):
            km.put("after", id="n")
            waited = sample("keepmem_replica_consistent_reads_total", outcome="primary")
            assert km.get("n").summary == "after"  # the SDK sent its token
            assert sample("keepmem_replica_consistent_reads_total", outcome="primary") == waited + 1
            # without a token, a replica within the lag limit may answer stale
            plain = httpx.get(
                f"{url}/v1/notes/n", headers={"Authorization": f"Bearer {key}"}, timeout=10
            )
            assert plain.status_code == 200 and plain.json()["summary"] == "before"


def test_a_lagging_replica_leaves_the_rotation_and_comes_back(cluster: Cluster) -> None:
    key = cluster.new_key()
    with served(cluster, replica_max_lag_seconds=0.5) as url:
        wait_for(lambda: in_rotation() == 1, "the replica in rotation")
        with replay_paused(cluster):
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as http:
                assert http.post("/v1/notes", json={"content": "x", "id": "a"}).status_code < 300
                wait_for(lambda: in_rotation() == 0, "the lagging replica to leave")
                assert sample("keepmem_replica_lag_seconds", replica="replica0") > 0.5
                # no token: the primary answers now, fresh
                before = reads("primary")
                assert http.get("/v1/notes/a").json()["summary"] == "x"
                assert reads("primary") == before + 1
        wait_for(lambda: in_rotation() == 1, "the replica to come back")


def test_a_read_that_must_write_is_answered_by_the_primary(cluster: Cluster) -> None:
    """`now` is created on its first read: the replica refuses the write, the
    primary answers, and the retry is counted."""
    key = cluster.new_key()
    with served(cluster) as url, Keepmem(url, key) as km:
        km.put("warm up the project", id="w")
        cluster.wait_replayed()
        retried = sample("keepmem_replica_retries_total", reason="read_only")
        r = httpx.get(f"{url}/v1/notes/now", headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 200, r.text
        assert sample("keepmem_replica_retries_total", reason="read_only") == retried + 1


def test_a_replica_read_touches_the_access_time_on_the_primary(cluster: Cluster) -> None:
    key = cluster.new_key()

    def accessed() -> float:
        return float(
            psql_on(
                cluster.primary,
                "SELECT extract(epoch FROM accessed_at) FROM notes WHERE id = 'touched'",
            )
        )

    with served(cluster) as url, Keepmem(url, key) as km:
        km.put("touch me", id="touched")
        cluster.wait_replayed()
        first = accessed()
        before = reads("replica")
        km.get("touched")
        assert reads("replica") == before + 1
        assert accessed() > first


# -- write-then-read pairs, then the replica killed (the thousands of pairs of
# the issue run on `keepmem up --replicas 1` below; here the same on the
# module's own cluster, fewer, then the replica's death and return) --------


PAIRS_PER_CLIENT = 100
CLIENTS = 5
# On `keepmem up --replicas 1`: 4 clients, 500 pairs each.
UP_CLIENTS, UP_PAIRS = 4, 500


def _pairs(url: str, key: str, client: int, count: int, start: int) -> tuple[int, int]:
    """``count`` write-then-read pairs; (misses, server errors)."""
    misses = errors = 0
    with Keepmem(url, key, max_retries=0) as km:
        for i in range(start, start + count):
            note = f"c{client}-{i}"
            body = f"pair {client} {i} {uuid.uuid4().hex[:8]}"
            try:
                km.put(body, id=note)
                if i % 4 == 3:  # a list as the read, else a get
                    found = [n.summary for n in km.list(prefix=note)]
                else:
                    found = [km.get(note).summary]
            except Exception as exc:  # noqa: BLE001 - counted: the test fails on any
                status = getattr(exc, "status", 500)
                if status >= 500:
                    errors += 1
                else:
                    misses += 1
                continue
            if body not in found:
                misses += 1
    return misses, errors


def test_every_write_is_read_back_and_a_killed_replica_moves_reads_to_the_primary(
    cluster: Cluster,
) -> None:
    keys = [cluster.new_key() for _ in range(CLIENTS)]
    with served(cluster) as url:
        wait_for(lambda: in_rotation() == 1, "the replica in rotation")
        by_replica, by_primary = reads("replica"), reads("primary")

        def load(count: int, start: int) -> list[tuple[int, int]]:
            with ThreadPoolExecutor(CLIENTS) as pool:
                futures = [
                    pool.submit(_pairs, url, keys[c], c, count, start) for c in range(CLIENTS)
                ]
                return [f.result() for f in futures]

        outcome = load(PAIRS_PER_CLIENT, 0)
        assert outcome == [(0, 0)] * CLIENTS
        served_by_replica = reads("replica") - by_replica
        assert served_by_replica >= 0.5 * CLIENTS * PAIRS_PER_CLIENT, served_by_replica

        # kill -9 the replica in the middle of a load: no 5xx, no miss
        with ThreadPoolExecutor(1) as side:
            running = side.submit(load, 60, PAIRS_PER_CLIENT)
            time.sleep(0.3)
            kill(cluster.standby)
            assert running.result() == [(0, 0)] * CLIENTS
        wait_for(lambda: in_rotation() == 0, "the dead replica to leave")
        by_primary = reads("primary")
        assert load(40, PAIRS_PER_CLIENT + 60) == [(0, 0)] * CLIENTS
        assert reads("primary") - by_primary >= CLIENTS * 40

        # restarted, it comes back into rotation by itself and serves again
        restart(cluster.standby)
        wait_for(lambda: in_rotation() == 1, "the restarted replica to return")
        by_replica = reads("replica")
        assert load(20, PAIRS_PER_CLIENT + 100) == [(0, 0)] * CLIENTS
        assert reads("replica") > by_replica


# -- the same on `keepmem up --replicas 1` (a subprocess) ----------------------------


def _metric(url: str, admin: str, name: str, **labels: str) -> float:
    body = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {admin}"}).text
    total = 0.0
    for line in body.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_keepmem_up_with_a_replica_reads_every_write_back_and_survives_its_death(
    tmp_path: Path,
) -> None:
    from app.cli.embedded import load_secrets
    from tests import upstack

    data_dir = tmp_path / "up"
    env = {"KEEPMEM_RATE_LIMIT_PER_MINUTE": "0", "KEEPMEM_API_WORKERS": "2"}
    stack = upstack.start(data_dir, "--replicas", "1", env=env)
    try:
        url, key = stack.url, stack.key
        admin = load_secrets(data_dir, create=False).admin_token
        wait_for(lambda: _metric(url, admin, "keepmem_replica_in_rotation") >= 1, "rotation", 60)
        before = _metric(url, admin, "keepmem_reads_total", served_by="replica")
        with ThreadPoolExecutor(UP_CLIENTS) as pool:
            outcome = list(pool.map(lambda c: _pairs(url, key, c, UP_PAIRS, 0), range(UP_CLIENTS)))
        assert outcome == [(0, 0)] * UP_CLIENTS  # 2,000 pairs: no miss, no 5xx
        by_replica = _metric(url, admin, "keepmem_reads_total", served_by="replica") - before
        assert by_replica >= UP_CLIENTS * UP_PAIRS / 2, by_replica

        standby = EmbeddedPostgres(data_dir / "replica-1")

        def load() -> list[tuple[int, int]]:
            with ThreadPoolExecutor(4) as pool:
                return list(pool.map(lambda c: _pairs(url, key, c, 80, UP_PAIRS), range(4)))

        with ThreadPoolExecutor(1) as side:
            running = side.submit(load)
            time.sleep(0.3)
            kill(standby)
            assert running.result() == [(0, 0)] * 4
        # the stack's supervisor restarts it; it rejoins the rotation by itself
        wait_for(lambda: _metric(url, admin, "keepmem_replica_in_rotation") >= 1, "return", 120)
    finally:
        log = stack.stop()
    assert stack.proc.returncode == 0, log[-3000:]
