"""Backups to an object store (issue 38), against moto's S3 server (S3's
wire protocol over HTTP): ``keepmem backup --to s3://``, a time recorded,
more written, the WAL sent by ``keepmem up``'s uploader, the local spool
deleted, and ``keepmem restore --from s3://`` to that time brings back
exactly the notes of before it. The helpers are tests/test_backup.py's.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import boto3
import pytest
from moto.server import ThreadedMotoServer

from app.cli import backup, migrate, objectstore
from app.cli.commands import build_parser
from app.cli.embedded import EmbeddedPostgres, load_secrets
from app.cli.restore import BackupError
from tests import test_backup as tb

BUCKET = "keepmem-backups"
URL = f"s3://{BUCKET}/stack-1"


@pytest.fixture(scope="module")
def s3() -> Iterator[str]:
    """moto's server, the bucket, and the AWS_* variables an operator sets."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    env = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": "test-key",
        "AWS_SECRET_ACCESS_KEY": "test-secret",
        "AWS_REGION": "us-east-1",
    }
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="test-key",
            aws_secret_access_key="test-secret",
        ).create_bucket(Bucket=BUCKET)
        try:
            yield endpoint
        finally:
            server.stop()


def _cli(*argv: str) -> int:
    args = build_parser().parse_args(list(argv))
    return int(args.func(args))


def _stored(prefix: str, url: str = URL) -> list[str]:
    return sorted(objectstore.Remote(url, Path("/nonexistent")).keys(prefix))


def test_backup_to_s3_restores_to_a_time_without_the_spool(
    s3: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    pg = EmbeddedPostgres(src)
    pg.start()
    try:
        pg.ensure_login_role(tb.APP_ROLE)
        migrate.upgrade(pg.url("postgres"), tb.APP_ROLE)
        secret = load_secrets(src, create=True).secret_key
        settings = tb._settings(pg, secret)
        assert _cli("backup", "--data-dir", str(src), "--to", URL) == 0
        spool = src / objectstore.SPOOL
        # Returned: the base backup is in the store, the spool keeps only its times.
        (first,) = backup.list_backups(spool)
        assert sorted(p.name for p in first.path.iterdir()) == [".uploaded", "keepmem.json"]
        files = {k.split("/")[-1] for k in _stored(f"base/{first.path.name}")}
        assert {"base.tar.gz", "pg_wal.tar.gz", "backup_manifest", "keepmem.json"} <= files
        assert _stored("wal") and not list((spool / "wal").glob("0*"))

        tenant, key = asyncio.run(tb._make_tenant(settings))
        asyncio.run(
            tb._write(
                settings,
                pg,
                key,
                [
                    {"id": "alpha", "content": "Alpha, the first text."},
                    {"id": "alpha", "content": "Alpha, the second text."},
                    {"id": "beta", "content": tb.DOC, "analyze": True},
                ],
            )
        )
        before = tb.snapshot(pg, tenant)
        time.sleep(0.05)
        target = datetime.now(UTC)
        time.sleep(0.05)
        asyncio.run(
            tb._write(
                settings,
                pg,
                key,
                [
                    {"id": "alpha", "content": "Alpha, the third text, after the time."},
                    {"id": "gamma", "content": "Gamma, after the time."},
                ],
            )
        )
        assert tb.snapshot(pg, tenant) != before
        # `keepmem up`'s schedule with KEEPMEM_BACKUP_DIR=s3://...: no base
        # backup due (the spool remembers the first), its uploader sends the WAL.
        up = settings.model_copy(update={"backup_dir": URL})
        parts = backup.scheduled(up, src, pg, [], say=lambda _: None)
        try:
            assert [p.name for p in parts] == ["backups", "backup-uploads"]
            segment = backup.archive_now(pg, spool)
            deadline = time.monotonic() + 30
            while f"wal/{segment}" not in _stored("wal"):
                assert time.monotonic() < deadline, "the uploader sent nothing"
                assert all(p.alive() for p in parts)
                time.sleep(0.2)
        finally:
            for part in parts:
                part.stop()  # type: ignore[attr-defined]
        assert backup.list_backups(spool) == [first]
        assert not (spool / "wal" / segment).exists()

        shutil.rmtree(spool)  # nothing lives only there
        into = tmp_path / "restored"
        capsys.readouterr()
        assert _cli("restore", "--from", URL, "--to", target.isoformat(), "--into", str(into)) == 0
        assert f"downloaded base backup {first.path.name}" in capsys.readouterr().err
        assert not list(tmp_path.glob(".restored-download-*"))
        assert load_secrets(into, create=False).secret_key == secret
        restored = EmbeddedPostgres(into)
        restored.start()
        try:
            assert tb.snapshot(restored, tenant) == before
            ids = restored.psql(
                f"SELECT string_agg(id, ',' ORDER BY id) FROM notes "
                f"WHERE tenant_id = '{tenant}' AND id NOT LIKE '.%'",
                "keepmem",
            ).strip()
            assert ids == "alpha,beta"
        finally:
            restored.stop()

        # Retention applies to the store: keeping one base backup deletes the
        # first and the WAL only it needed; the time is then out of reach.
        assert _cli("backup", "--data-dir", str(src), "--to", URL, "--keep", "1") == 0
        (newest,) = backup.list_backups(src / objectstore.SPOOL)
        assert {k.split("/")[1] for k in _stored("base")} == {newest.path.name}
        segments = [k.split("/")[1] for k in _stored("wal") if len(k) == len("wal/") + 24]
        assert segments and min(s[8:] for s in segments) >= newest.start_wal[8:]
        capsys.readouterr()
        again = tmp_path / "too-old"
        assert _cli("restore", "--from", URL, "--to", target.isoformat(), "--into", str(again)) == 1
        assert "before the oldest backup" in capsys.readouterr().err
    finally:
        pg.stop()


def test_an_unreachable_store_is_reported_and_the_spool_kept(
    s3: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens
    spool = tmp_path / "spool"
    (spool / "wal").mkdir(parents=True)
    (spool / "wal" / "000000010000000000000007").write_bytes(b"wal")
    url = f"s3://{BUCKET}/other-stack"
    remote = objectstore.Remote(url, spool, retry_timeout_s=1)
    with pytest.raises(BackupError, match="upload of wal/000000010000000000000007 failed"):
        remote.sync(keep=1)
    assert (spool / "wal" / "000000010000000000000007").read_bytes() == b"wal"
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3)  # reachable again: sent, then gone
    assert objectstore.Remote(url, spool).sync(keep=1) == 1
    assert not (spool / "wal" / "000000010000000000000007").exists()
    assert "wal/000000010000000000000007" in _stored("wal", url)
