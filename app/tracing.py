"""OpenTelemetry tracing, off unless ``KEEPMEM_OTEL_ENDPOINT`` names an
OTLP/HTTP collector. Spans: each request (FastAPI's instrumentation), each
SQL statement (a listener on the engine: the statement text, never its
parameters, which hold tenants' data) and each job run.

Each process has its own provider (not the global one), flushed when the
app or the worker stops.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from app.settings import Settings

STATEMENT_CHARS = 2000
_tracer: Any = None  # the process's tracer once set up


def setup(settings: Settings) -> Any:
    """A TracerProvider exporting to the configured collector (None: off)."""
    global _tracer
    if not settings.otel_endpoint:
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:  # pragma: no cover - the extra is missing
        raise RuntimeError(
            "KEEPMEM_OTEL_ENDPOINT is set but OpenTelemetry is not installed: "
            "pip install 'keepmem[otel]'"
        ) from exc
    provider = TracerProvider(
        resource=Resource.create({"service.name": settings.otel_service_name})
    )
    endpoint = settings.otel_endpoint.rstrip("/") + "/v1/traces"
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    _tracer = provider.get_tracer("keepmem")
    return provider


def instrument_app(app: Any, provider: Any) -> None:
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    FastAPIInstrumentor.instrument_app(
        app, tracer_provider=provider, excluded_urls="/metrics,/v1/live"
    )


def instrument_engine(engine: AsyncEngine, provider: Any) -> None:
    """A span per SQL statement run through ``engine``."""
    tracer = provider.get_tracer("keepmem.sql")
    sync = engine.sync_engine

    @event.listens_for(sync, "before_cursor_execute")
    def _start(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        span = tracer.start_span(
            statement.split(None, 1)[0].upper() if statement else "SQL",
            attributes={
                "db.system": "postgresql",
                "db.statement": statement[:STATEMENT_CHARS],
            },
        )
        conn.info.setdefault("keepmem.spans", []).append(span)

    @event.listens_for(sync, "after_cursor_execute")
    def _end(conn: Any, *_: Any) -> None:
        spans = conn.info.get("keepmem.spans")
        if spans:
            spans.pop().end()

    @event.listens_for(sync, "handle_error")
    def _failed(context: Any) -> None:
        spans = context.connection.info.get("keepmem.spans") if context.connection else None
        if spans:
            span = spans.pop()
            span.record_exception(context.original_exception)
            span.end()


@contextmanager
def span(name: str, attributes: dict[str, Any] | None = None) -> Iterator[None]:
    """A span around a block when tracing is on; nothing otherwise."""
    if _tracer is None:
        yield
        return
    with _tracer.start_as_current_span(name, attributes=attributes or {}):
        yield
