"""Backups and point-in-time restore of the embedded PostgreSQL (issue 38):
a base backup, notes written through keepmem (versions, parts, vectors), a
time recorded, more written, deleted and changed; restored to that time
into a new data directory, exactly the notes of before the time are there.

These tests run their own embedded PostgreSQL (archiving needs a restart
and its own WAL), not the suite's stack; they run in file order, the last
one prunes.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from pydantic import SecretStr

from app import tenancy
from app.accounts import service as accounts
from app.cli import backup, migrate
from app.cli.commands import build_parser
from app.cli.embedded import EmbeddedPostgres, load_secrets
from app.cli.restore import BackupError, list_backups, restore
from app.db import Database
from app.main import create_app
from app.pipeline import runner
from app.pipeline.pipeline import Pipeline
from app.providers.embedding.base import QueryCache
from app.providers.summarization.base import registry as summarizers
from app.settings import Settings

APP_ROLE = "keepmem_app"
TABLES = ("notes", "note_versions", "parts", "embeddings")
DOC = "\n\n".join(
    f"# Section {i}\n\n" + f"Paragraph about topic {i} with enough words to matter. " * 12
    for i in range(3)
)


class HashEmbedder:
    """A deterministic stand-in for the model: the vectors are what is
    checked, not their meaning."""

    model_id = "test:sha256"
    dim = 384

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    async def embed_query(self, text: str) -> list[float]:
        return self._vector(text)

    async def aclose(self) -> None:
        return None

    @staticmethod
    def _vector(text: str) -> list[float]:
        digest = hashlib.sha256(text.encode()).digest()
        return [(digest[i % 32] + i) % 251 / 251 + 0.001 for i in range(384)]


def _settings(pg: EmbeddedPostgres, secret: str) -> Settings:
    return Settings(
        database_url=pg.url(APP_ROLE),
        owner_database_url=pg.url("postgres"),
        redis_url=None,
        secret_key=SecretStr(secret),
        admin_token=SecretStr("backup-test-admin"),
        rate_limit_per_minute=0,
        auth_failures_per_minute=0,
        graph_provider="none",
        part_target_chars=900,
    )


def snapshot(pg: EmbeddedPostgres, tenant: str) -> dict[str, str]:
    """Every row of the note tables for ``tenant``, as text (superuser)."""
    return {
        table: pg.psql(
            f"SELECT coalesce(string_agg(t::text, E'\\n' ORDER BY t::text), '') FROM {table} t "
            f"WHERE tenant_id = '{tenant}'",
            "keepmem",
        )
        for table in TABLES
    }


def count(pg: EmbeddedPostgres, sql: str) -> int:
    return int(pg.psql(sql, "keepmem").strip())


async def _make_tenant(settings: Settings) -> tuple[str, str]:
    db = Database.from_settings(settings)
    try:
        async with tenancy.system_transaction(db) as session:
            assert settings.secret_key is not None
            new = await accounts.create_tenant(
                session, name="backed-up", server_secret=settings.secret_key.get_secret_value()
            )
            return str(new.tenant.id), new.key.secret
    finally:
        await db.dispose()


async def _write(settings: Settings, pg: EmbeddedPostgres, key: str, steps: list[dict]) -> None:
    """Each step through the API (put, or delete), then every job queued by
    them run as a worker runs it (summaries, parts, vectors)."""
    app = create_app(settings)
    headers = {"Authorization": f"Bearer {key}"}
    db = Database.from_settings(settings)
    pipeline = Pipeline(
        db=db,
        settings=settings,
        embedder=HashEmbedder(),
        summarizer=summarizers.create("extractive"),
        query_cache=QueryCache(),
    )
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://k.test") as c:
                for step in steps:
                    if "delete" in step:
                        r = await c.delete("/v1/notes/" + quote(step["delete"]), headers=headers)
                    else:
                        r = await c.post("/v1/notes", json=step, headers=headers)
                    assert r.status_code == 200, r.text
                for _ in range(5):  # jobs can queue more jobs (analyze -> embed parts)
                    r = await c.get("/v1/jobs", params={"status": "pending"}, headers=headers)
                    pending = r.json()["jobs"]
                    if not pending:
                        break
                    for job in reversed(pending):
                        row = pg.psql(
                            f"SELECT tenant_id, id FROM jobs WHERE public_id = '{job['id']}'",
                            "keepmem",
                        )
                        tenant, job_id = row.strip().split("|")
                        assert await runner.run(pipeline, uuid.UUID(tenant), int(job_id)) == "done"
    finally:
        await db.dispose()


@dataclass
class Scenario:
    pg: EmbeddedPostgres
    src: Path
    dest: Path
    root: Path
    tenant: str
    key: str
    secret: str
    target: datetime
    before: dict[str, str]
    first: backup.BaseBackup
    end: datetime  # after the last write
    after: dict[str, str]


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    root = tmp_path_factory.mktemp("backups")
    src = root / "src"
    src.mkdir()
    pg = EmbeddedPostgres(src)
    pg.start()
    try:
        pg.ensure_login_role(APP_ROLE)
        migrate.upgrade(pg.url("postgres"), APP_ROLE)
        secret = load_secrets(src, create=True).secret_key
        settings = _settings(pg, secret)
        dest = root / "backups"
        first = backup.take_backup(pg, dest, data_dir=src)
        tenant, key = asyncio.run(_make_tenant(settings))
        asyncio.run(
            _write(
                settings,
                pg,
                key,
                [
                    {"id": "alpha", "content": "Alpha, the first text."},
                    {"id": "alpha", "content": "Alpha, the second text."},
                    {"id": "beta", "content": DOC, "analyze": True},
                    {"id": "gamma", "content": "Gamma, deleted after the time."},
                ],
            )
        )
        before = snapshot(pg, tenant)
        time.sleep(0.05)  # commits of before and after the time apart on the clock
        target = datetime.now(UTC)
        time.sleep(0.05)
        asyncio.run(
            _write(
                settings,
                pg,
                key,
                [
                    {"id": "alpha", "content": "Alpha, the third text, after the time."},
                    {"id": "delta", "content": DOC.replace("topic", "subject"), "analyze": True},
                    {"delete": "gamma"},
                ],
            )
        )
        after = snapshot(pg, tenant)
        end = datetime.now(UTC)
        backup.archive_now(pg, dest)  # what recovery needs reaches the archive
        yield Scenario(pg, src, dest, root, tenant, key, secret, target, before, first, end, after)
    finally:
        pg.stop()


def test_restore_to_a_time_brings_back_exactly_the_notes_written_before_it(
    scenario: Scenario,
) -> None:
    s = scenario
    t = f"tenant_id = '{s.tenant}'"
    # what the restore must undo happened
    assert snapshot(s.pg, s.tenant) != s.before
    assert count(s.pg, f"SELECT count(*) FROM notes WHERE {t} AND id = 'delta'") == 1
    into = s.root / "restored"
    args = build_parser().parse_args(
        ["restore", "--from", str(s.dest), "--to", s.target.isoformat(), "--into", str(into)]
    )
    assert args.func(args) == 0
    assert load_secrets(into, create=False).secret_key == s.secret
    restored = EmbeddedPostgres(into)  # as `keepmem up --data-dir` starts it
    restored.start()
    try:
        assert restored.psql("SELECT pg_is_in_recovery()").strip() == "f"
        assert snapshot(restored, s.tenant) == s.before
        ids = restored.psql(
            f"SELECT string_agg(id, ',' ORDER BY id) FROM notes WHERE {t} AND id NOT LIKE '.%'",
            "keepmem",
        ).strip()
        assert ids == "alpha,beta,gamma"
        assert (
            count(restored, f"SELECT count(*) FROM note_versions WHERE {t} AND note_id = 'alpha'")
            == 1
        )
        parts = count(restored, f"SELECT count(*) FROM parts WHERE {t} AND note_id = 'beta'")
        vectors = count(
            restored,
            f"SELECT count(*) FROM embeddings WHERE {t} AND note_id = 'beta' AND kind = 'part'",
        )
        assert parts >= 2 and vectors == parts
        assert count(restored, f"SELECT count(*) FROM embeddings WHERE {t} AND kind = 'note'") >= 3
        # keepmem serves it: the tenant's key works (the server secret came along)
        migrate.upgrade(restored.url("postgres"), APP_ROLE)
        settings = _settings(restored, load_secrets(into, create=False).secret_key)

        async def read() -> dict:
            app = create_app(settings)
            async with app.router.lifespan_context(app):
                transport = httpx.ASGITransport(app=app)
                async with httpx.AsyncClient(transport=transport, base_url="http://k.test") as c:
                    headers = {"Authorization": f"Bearer {s.key}"}
                    alpha = (await c.get("/v1/notes/alpha", headers=headers)).json()
                    versions = await c.get("/v1/notes/alpha/versions", headers=headers)
                    gone = await c.get("/v1/notes/delta", headers=headers)
                    return {
                        "alpha": alpha["summary"],
                        "versions": versions.json()["count"],
                        "delta": gone.status_code,
                    }

        got = asyncio.run(read())
        assert got == {"alpha": "Alpha, the second text.", "versions": 1, "delta": 404}
    finally:
        restored.stop()


def test_the_last_moment_archived_restores_the_last_state(scenario: Scenario) -> None:
    # archive_now ends the archive with a commit: the replay to a time after
    # the last write stops there
    s = scenario
    done = restore(s.dest, s.end, s.root / "at-the-end", say=lambda _: None)
    assert done.last_commit is not None and done.last_commit <= s.end < done.stopped_before
    restored = EmbeddedPostgres(s.root / "at-the-end")
    restored.start()
    try:
        assert snapshot(restored, s.tenant) == s.after
    finally:
        restored.stop()


def test_a_restore_refuses_what_the_backups_cannot_give(
    scenario: Scenario, capsys: pytest.CaptureFixture[str]
) -> None:
    s = scenario
    new = s.root / "refused"
    now = datetime.now(UTC)
    with pytest.raises(BackupError, match="in the future"):
        restore(s.dest, now + timedelta(hours=1), new)
    with pytest.raises(BackupError, match="before the oldest backup"):
        restore(s.dest, s.first.finished - timedelta(seconds=1), new)
    # Nothing archived since the last segment: a later time is past the archive.
    with pytest.raises(BackupError, match="past the archive"):
        restore(s.dest, now, new)
    new.mkdir()
    (new / "something").write_text("x")
    with pytest.raises(BackupError, match="not empty"):
        restore(s.dest, s.target, new)
    args = build_parser().parse_args(
        ["restore", "--from", "gs://bucket/keepmem", "--to", s.target.isoformat(), "--into", "x"]
    )
    assert args.func(args) == 1
    assert "gs:// destinations are not supported" in capsys.readouterr().err
    assert not (s.root / "x").exists()


def test_backups_are_verified_and_pruned_with_the_wal_only_they_needed(
    scenario: Scenario,
) -> None:
    s = scenario
    # the command line, against the running stack (attaches, no restart)
    args = build_parser().parse_args(
        ["backup", "--data-dir", str(s.src), "--to", str(s.dest), "--keep", "5"]
    )
    assert args.func(args) == 0
    assert len(list_backups(s.dest)) == 2
    assert s.pg.alive()
    # a base backup with a changed byte fails verification
    newest = list_backups(s.dest)[-1]
    backup.verify(newest.path)
    corrupt = shutil.copytree(newest.path, s.root / "corrupt")
    with open(corrupt / "base.tar.gz", "r+b") as fh:
        fh.seek((corrupt / "base.tar.gz").stat().st_size // 2)
        byte = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(BackupError):
        backup.verify(corrupt)
    settings = _settings(s.pg, s.secret).model_copy(
        update={"backup_dir": str(s.dest), "backup_every_hours": 0.0005, "backup_keep": 2}
    )
    schedule = backup.scheduled(settings, s.src, s.pg, [], say=lambda _: None)[0]
    try:
        deadline = time.monotonic() + 60
        while s.first in list_backups(s.dest):  # a scheduled run, then its prune
            assert time.monotonic() < deadline, "the schedule took no backup"
            assert schedule.alive()
            time.sleep(0.2)
    finally:
        schedule.stop()
    kept = list_backups(s.dest)
    assert s.first not in kept and len(kept) == 2
    oldest = min(b.start_wal for b in kept)
    segments = [p.name for p in (s.dest / "wal").iterdir() if len(p.name) == 24]
    assert segments and min(segments)[8:] >= oldest[8:]
    assert s.first.start_wal not in segments
    with pytest.raises(BackupError, match="before the oldest backup"):
        restore(s.dest, s.target, s.root / "too-old")
