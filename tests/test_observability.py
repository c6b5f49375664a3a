"""Operations: Prometheus metrics (read with prometheus_client's own
parser), OpenTelemetry traces received by a local OTLP/HTTP collector, and
JSON log lines carrying the request and tenant ids."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client.parser import text_string_to_metric_families

from app import metrics
from app.cli.embedded import free_port
from app.db import Database
from app.logs import JsonFormatter
from app.main import create_app
from app.request_vars import request_id_var, tenant_var
from app.settings import Settings
from tests.conftest import ADMIN_TOKEN
from tests.test_pipeline import run_all


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(found: dict, name: str, **labels: str) -> float | None:
    return found.get((name, frozenset(labels.items())))


async def scrape(client: httpx.AsyncClient) -> dict:
    metrics.QUEUE_TTL_S = 0.0  # read the queue afresh each time here
    r = await client.get("/metrics", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    return samples(r.text)


async def test_metrics_need_a_token(client) -> None:
    assert (await client.get("/metrics")).status_code == 401
    r = await client.get("/metrics", headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401 and "METRICS_TOKEN" in r.json()["error"]


async def test_requests_queue_pool_and_process_are_measured(client, tenant) -> None:
    r = await client.post("/v1/notes", json={"id": "m-1", "content": "measured"},
                          headers=tenant.headers)  # fmt: skip
    assert r.status_code == 200
    missing = await client.get("/v1/notes/m-nope", headers=tenant.headers)
    assert missing.status_code == 404
    found = await scrape(client)
    key = "keepmem_http_request_duration_seconds_count"
    assert value(found, key, method="POST", route="/v1/notes", status="200") >= 1
    # Labelled by the route template, not the path (one series per route).
    assert value(found, key, method="GET", route="/v1/notes/{note_id}", status="404") >= 1
    assert value(found, "keepmem_jobs", kind="embed", status="pending") >= 1
    assert value(found, "keepmem_jobs_oldest_pending_age_seconds", kind="embed") >= 0
    assert value(found, "keepmem_db_pool_connections", state="size") >= 1
    assert value(found, "process_resident_memory_bytes") > 0


async def test_dead_jobs_and_the_workers_figures(client, tenant, make_pipeline) -> None:
    r = await client.post("/v1/notes", json={"uri": "http://10.0.0.1/never"},
                          headers=tenant.headers)  # fmt: skip
    assert r.status_code in (200, 202), r.text
    before = await scrape(client)
    done_before = (
        value(before, "keepmem_job_duration_seconds_count", kind="fetch", outcome="dead") or 0
    )
    await run_all(make_pipeline(), client, tenant)
    after = await scrape(client)
    assert (value(after, "keepmem_jobs", kind="fetch", status="dead") or 0) >= 1
    assert value(after, "keepmem_job_duration_seconds_count", kind="fetch", outcome="dead") == (
        done_before + 1
    )
    assert value(after, "keepmem_job_failures_total", kind="fetch", outcome="dead") >= 1


async def test_a_worker_serves_its_metrics_on_its_port(client, tenant, make_pipeline) -> None:
    r = await client.post("/v1/notes", json={"id": "w-emb", "content": "embed me"},
                          headers=tenant.headers)  # fmt: skip
    assert r.status_code == 200
    await run_all(make_pipeline(), client, tenant)
    port = free_port()
    metrics.serve(port, "127.0.0.1")
    text = await asyncio.to_thread(
        lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    )
    found = samples(text)
    assert value(found, "keepmem_embedded_notes_total") >= 1
    assert value(found, "keepmem_job_duration_seconds_count", kind="embed", outcome="done") >= 1


class Collector:
    """An OTLP/HTTP trace receiver on 127.0.0.1."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                collector.requests.append(request)
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def spans(self) -> list[Any]:
        return [
            span
            for request in self.requests
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector()
    yield c
    c.server.shutdown()


def attrs(span: Any) -> dict[str, str]:
    return {a.key: a.value.string_value or str(a.value.int_value) for a in span.attributes}


async def test_traces_cover_requests_sql_and_jobs(
    settings: Settings, collector, tenant, make_pipeline
) -> None:
    traced = settings.model_copy(update={"otel_endpoint": collector.url})
    db = Database.from_settings(traced)  # its own engine: the listeners stay with it
    app = create_app(traced, db=db)
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
                r = await http.post("/v1/notes", json={"id": "traced", "content": "a trace"},
                                    headers=tenant.headers)  # fmt: skip
                assert r.status_code == 200
                await run_all(make_pipeline(), http, tenant)
    finally:
        await db.dispose()
    spans = collector.spans()
    request = next(s for s in spans if attrs(s).get("http.route") == "/v1/notes"
                   and "POST" in s.name)  # fmt: skip
    sql = [s for s in spans if s.trace_id == request.trace_id and "db.statement" in attrs(s)]
    assert any("INSERT INTO notes" in attrs(s)["db.statement"] for s in sql)
    # Parameters (tenants' data) never reach the collector.
    assert all("a trace" not in attrs(s)["db.statement"] for s in sql)
    assert any(s.name == "job embed" for s in spans)
    services = {
        a.value.string_value
        for r in collector.requests
        for a in r.resource_spans[0].resource.attributes
        if a.key == "service.name"
    }
    assert services == {"keepmem"}


def test_log_lines_are_json_with_request_and_tenant_ids() -> None:
    formatter = JsonFormatter()
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(formatter.format(record))

    logger = logging.getLogger("keepmem.test-json")
    logger.addHandler(Keep())
    logger.propagate = False

    async def a_request() -> None:  # as the middleware and the scope dependency set them
        request_id_var.set("req-123")
        tenant_var.set("ten-456")
        try:
            raise ValueError("boom")
        except ValueError:
            logger.exception("something failed")

    asyncio.run(a_request())
    logger.warning("outside any request")
    first, second = (json.loads(line) for line in lines)
    assert first["request_id"] == "req-123" and first["tenant_id"] == "ten-456"
    assert first["level"] == "ERROR" and "ValueError: boom" in first["exception"]
    assert second["request_id"] is None and second["tenant_id"] is None
    assert second["message"] == "outside any request"


async def test_a_draining_server_is_not_ready(settings: Settings, db: Database) -> None:
    app = create_app(settings, db=db)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://d") as http:
            assert (await http.get("/v1/ready")).status_code == 200
            app.state.drain.requested = True  # as SIGTERM does (app.main.drain)
            r = await http.get("/v1/ready")
            assert r.status_code == 503 and "draining" in r.json()["warnings"][-1]
            assert (await http.get("/v1/live")).status_code == 200


def test_malloc_arenas_are_limited_unless_the_operator_says_otherwise(monkeypatch) -> None:
    from app.cli import process

    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    process.limit_malloc_arenas()
    assert os.environ["MALLOC_ARENA_MAX"] == "2"  # inherited by the processes it starts
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    process.limit_malloc_arenas()
    assert os.environ["MALLOC_ARENA_MAX"] == "4"
