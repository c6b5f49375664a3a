"""Service configuration: one Settings class, environment prefix ``KEEPMEM_``.

Nothing else in the code base reads ``os.environ``.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Annotated

from pydantic import Field, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


@dataclass(frozen=True, slots=True)
class Limits:
    """The limits the notes rules apply, as one value (``Settings.limits``)."""

    max_content_chars: int = 1_000_000
    max_summary_chars: int = 10_000
    max_summary_length: int = 200
    max_list_limit: int = 1000
    max_fts_chars: int = 200_000
    graph_extraction: bool = True  # queue extract_graph jobs (graph_provider != "none")
    # A note longer than this (characters) is cut into passages (a chunk job),
    # when chunking is on; 0 turns chunking off.
    chunk_min_chars: int = 2000


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, and a container's
    CPU quota (cgroup v2 ``cpu.max``) when it is lower (``os.cpu_count()``
    counts the host's cores in either case)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cores = min(cores or 1, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(cores or 1, 1)


class Settings(BaseSettings):
    """Everything the API, the worker and the CLI can be configured with."""

    model_config = SettingsConfigDict(env_prefix="KEEPMEM_", extra="ignore")

    # The application connects as a non-superuser role so row-level security
    # applies to it; migrations and role management use the owner URL.
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL the API and worker use (a non-superuser role).",
    )
    owner_database_url: str | None = Field(
        default=None,
        description="URL of the schema owner, used for migrations and admin maintenance. "
        "Defaults to database_url.",
    )
    app_role: str = Field(default="keepmem_app", description="Login role the app connects as.")
    app_role_password: SecretStr | None = None
    redis_url: str | None = None

    secret_key: SecretStr | None = Field(
        default=None, description="Server secret keying the API-key hashes."
    )
    admin_token: SecretStr | None = Field(
        default=None, description="Bearer credential for the /v1/admin API."
    )

    # OAuth 2.1 (app.oauth). The issuer is this URL; unset, each request's
    # own base URL (fine on one host; set it behind a proxy or load balancer).
    public_url: str | None = Field(
        default=None, description="Public base URL (OAuth issuer), e.g. https://mem.example.com"
    )
    oauth_access_token_seconds: int = Field(
        default=900, ge=1, le=86400, description="Lifetime of an OAuth access token."
    )
    oauth_refresh_token_days: int = Field(
        default=30, ge=1, le=365, description="Lifetime of an OAuth refresh token."
    )
    oauth_registration: bool = Field(
        default=True, description="Open dynamic client registration (MCP clients need it)."
    )
    oauth_registrations_per_minute: int = Field(
        default=10,
        ge=0,
        description="Client registrations per minute per client address (429 above; 0 = off).",
    )
    oauth_max_unused_clients: int = Field(
        default=5000,
        ge=1,
        description="Registered clients kept that never completed a grant; past it the "
        "oldest of them are deleted to make room.",
    )

    audit_retention_days: int = Field(
        default=400, ge=1, le=36600, description="Audit entries older than this are dropped."
    )

    data_dir: str = Field(default=".keepmem", description="Embedded stack data directory.")
    # Backups of the embedded stack (app.cli.backup): `keepmem up` archives
    # its WAL into backup_dir and takes a base backup every so many hours,
    # keeping the newest few (and the WAL they need).
    backup_dir: str | None = Field(
        default=None,
        description="Where `keepmem up` keeps backups of the embedded PostgreSQL (a "
        "directory, or s3://bucket/prefix through a local spool); unset: no scheduled backups.",
    )
    backup_every_hours: float = Field(
        default=24.0, gt=0, le=8760, description="Hours between scheduled base backups."
    )
    backup_keep: int = Field(
        default=7, ge=1, le=1000, description="Base backups kept (older ones and their WAL go)."
    )
    backup_archive_timeout_seconds: int = Field(
        default=300,
        ge=10,
        le=86400,
        description="A quiet server's WAL reaches the archive within this long (PostgreSQL's "
        "archive_timeout): the most a lost disk can lose.",
    )
    host: str = "127.0.0.1"
    port: int = 8765
    # One API process saturates one core (its Python) while PostgreSQL waits
    # on it (issue 36), so `serve` and `up` run one per usable core. At most
    # four: each holds its own query-embedding model (measured ~440 MB
    # resident once loaded, ~160 MB before) and up to db_pool_size +
    # db_max_overflow connections; four full pools are 80 connections,
    # inside PostgreSQL's stock max_connections of 100. 1 is the single
    # process of before.
    api_workers: int = Field(
        default_factory=lambda: min(usable_cores(), 4),
        ge=1,
        le=64,
        description="API processes of `keepmem serve` / `keepmem up` on one port (default: "
        "one per usable core, at most 4).",
    )

    db_pool_size: int = 10
    db_max_overflow: int = 10
    db_pgbouncer: bool = Field(
        default=False,
        description="KEEPMEM_DATABASE_URL points at PgBouncer in transaction pooling mode.",
    )
    # Read replicas (app.replicas): streaming standbys of the primary that
    # serve finds, lists and gets. A read carrying a client's consistency
    # token waits this long for a replica that has replayed its write, else
    # the primary answers; a replica further behind than the lag limit
    # leaves the rotation until it catches up.
    database_replica_urls: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="URLs of streaming read replicas of KEEPMEM_DATABASE_URL (same role; "
        "comma-separated or a JSON list). Empty: every request uses the primary.",
    )
    replica_wait_ms: int = Field(
        default=200,
        ge=0,
        le=10_000,
        description="How long a read carrying X-Keepmem-Consistency waits for a replica "
        "that has replayed that write before the primary serves it.",
    )
    replica_max_lag_seconds: float = Field(
        default=10.0,
        gt=0,
        le=3600,
        description="A replica further behind the primary than this leaves the rotation "
        "(it comes back by itself once it has caught up).",
    )

    # Limits. Request bodies above max_body_bytes are refused with 413 before
    # they are parsed; content and summary have their own caps.
    max_body_bytes: int = 4 * 1024 * 1024
    max_content_chars: int = 1_000_000
    max_summary_chars: int = 10_000
    max_summary_length: int = 200
    max_list_limit: int = 1000
    max_projects_per_tenant: int = Field(
        default=1000, description="Projects a tenant may create (X-Project on first use)."
    )
    max_fts_chars: int = 200_000
    max_upload_bytes: int = Field(
        default=25 * 1024 * 1024, description="Largest file accepted by POST /v1/upload."
    )
    max_pdf_pages: int = Field(default=1000, description="PDF pages read per document.")

    # Fetching URIs (put by uri). Non-public addresses are refused unless listed.
    fetch_max_bytes: int = Field(default=50 * 1024 * 1024, description="Largest document fetched.")
    fetch_timeout_seconds: float = Field(default=30.0, description="Deadline of one fetch.")
    fetch_allow_networks: list[str] = Field(
        default_factory=list,
        description="CIDRs that may be fetched although not public (e.g. an intranet wiki).",
    )
    rate_limit_per_minute: int = Field(
        default=1200, description="Requests per minute per API key (a token bucket); 0 disables."
    )
    auth_failures_per_minute: int = Field(
        default=30,
        description="Failed authentications per minute per client address before it gets "
        "429s; 0 disables.",
    )
    # A request's key is otherwise looked up in the database every time. A
    # revocation through the API ends a cached key in every process at once
    # (Redis carries a revocation epoch); this bounds the rest: Redis down,
    # a tenant disabled or a key revoked in the database directly.
    key_cache_seconds: float = Field(
        default=5.0,
        ge=0,
        le=300,
        description="Seconds an API process remembers a resolved API key (0: looked up on "
        "every request).",
    )
    # A client's address is the connection's peer unless the peer is one of
    # these: then it is what the proxy says (X-Forwarded-For, -Proto).
    trusted_proxies: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Addresses or CIDRs of the reverse proxies whose X-Forwarded-For and "
        "X-Forwarded-Proto are believed (comma-separated or a JSON list; '*' trusts every "
        "peer). Empty: no forwarded header is believed.",
    )

    # Providers. Offline defaults: MiniLM embeddings and extractive summaries.
    embedding_provider: str = Field(
        default="local", description="local | openai | voyage | gemini | mistral"
    )
    embedding_model: str = ""
    embedding_dim: int = 0
    embedding_api_key: SecretStr | None = None
    embedding_base_url: str = ""
    embedding_threads: int = 2
    embedding_batch_size: int = 8
    embedding_spin: bool = Field(
        default=False, description="Let onnxruntime threads busy-wait (faster on a dedicated host)."
    )
    ocr_provider: str = Field(
        default="rapidocr", description="rapidocr (offline, in its wheel) or tesseract."
    )
    graph_provider: str = Field(
        default="spacy",
        description="Entities and relations: spacy (offline), openai (OpenAI-compatible) "
        "or none (no extract_graph jobs).",
    )
    graph_timeout_seconds: float = Field(
        default=60.0,
        gt=0,
        description="spaCy's time for one note: past it the extraction's child process is "
        "killed (and replaced) and the job is dead with the reason.",
    )
    media_provider: str = Field(
        default="none", description="Describe images with a vision model: none or openai."
    )
    media_model: str = "gpt-4o-mini"
    media_base_url: str = ""
    media_api_key: SecretStr | None = None
    graph_model: str = "gpt-4o-mini"
    graph_base_url: str = ""
    graph_api_key: SecretStr | None = None
    summarization_provider: str = Field(
        default="extractive",
        description="passthrough | truncate | first_paragraph | extractive | openai | anthropic",
    )
    summarization_model: str = ""
    summarization_api_key: SecretStr | None = None
    summarization_base_url: str = ""
    summary_context_notes: int = 5
    # Speech to text for audio documents: off unless a provider is named
    # (then an audio file's note holds its transcript, with times).
    transcription_provider: str = Field(
        default="none",
        description="none (audio is stored as its metadata line) or openai "
        "(OpenAI-compatible POST /audio/transcriptions).",
    )
    transcription_model: str = "whisper-1"
    transcription_api_key: SecretStr | None = None
    transcription_base_url: str = ""
    # Coding-agent sessions (app.sessions): compressing events with a model
    # is off unless a provider is named; a project's tokens per UTC day are
    # capped by session_llm_tokens_per_day (a project may set less).
    session_llm_provider: str = Field(default="none", description="none | openai | anthropic")
    session_llm_model: str = "gpt-4o-mini"
    session_llm_api_key: SecretStr | None = None
    session_llm_base_url: str = ""
    session_llm_tokens_per_day: int = Field(default=200_000, ge=0)
    session_idle_minutes: int = Field(
        default=30, ge=1, description="A session quiet this long is checkpointed."
    )
    # Memory formation (app.memories): extraction from messages by rules
    # unless a model is named; a project's tokens per UTC day are capped by
    # memory_llm_tokens_per_day (a project may set less). Past the budget a
    # batch is read by the rules.
    memory_llm_provider: str = Field(default="none", description="none | openai | anthropic")
    memory_llm_model: str = "gpt-4o-mini"
    memory_llm_api_key: SecretStr | None = None
    memory_llm_base_url: str = ""
    memory_llm_tokens_per_day: int = Field(default=500_000, ge=0)
    part_target_chars: int = 1200
    analyze_min_chars: int = 300
    # Grounding (app.grounding): long notes cut into passages by MiniLM tokens.
    chunk_passages: bool = Field(
        default=True, description="Cut long notes into passages (parts with spans)."
    )
    chunk_min_chars: int = Field(
        default=2000,
        ge=100,
        description="Notes longer than this (characters) get a chunk job; the job cuts "
        "those longer than the model's window (254 tokens) into passages.",
    )
    # Chosen by 2-fold cross-validation in bench/passages.py (BENCHMARKS.md,
    # issue 35): the folds chose 192/48 and 254/64, within noise of each
    # other; 254 is the model's own window and makes the fewest passages.
    passage_tokens: int = Field(
        default=254, ge=16, le=254, description="A passage's size in MiniLM tokens."
    )
    passage_overlap: int = Field(
        default=64, ge=0, le=127, description="Tokens a passage shares with the one before."
    )

    # Background jobs.
    job_max_attempts: int = 5
    job_backoff_base_seconds: float = 30.0
    job_backoff_max_seconds: float = 3600.0
    job_lease_seconds: float = 120.0
    job_dispatch_timeout_seconds: float = 120.0
    job_timeout_seconds: int = 900
    dispatch_poll_seconds: float = 0.2
    dispatch_max_inflight: int = 128
    # Slow lanes: work that can hold a worker slot for long. Their caps count
    # jobs in flight on every worker together, and stay below one worker's
    # concurrency (checked below), so they never fill a worker's slots and a
    # put's embedding always finds one.
    dispatch_background_inflight: int = Field(
        default=3,
        ge=1,
        description="Of those, at most this many background jobs (graph extraction, passages, "
        "counts).",
    )
    dispatch_background_per_tenant: int = Field(
        default=2, ge=1, description="Background jobs in flight per tenant."
    )
    dispatch_remote_inflight: int = Field(
        default=3,
        ge=1,
        description="Jobs that wait on another host in flight: webhook deliveries and "
        "fetches of note URIs (a receiver or a page that never answers holds a slot to "
        "its timeout).",
    )
    dispatch_remote_per_tenant: int = Field(
        default=2, ge=1, description="Webhook deliveries and fetches in flight per tenant."
    )
    embed_batch_jobs: int = Field(default=64, description="Embedding jobs per model call.")
    worker_poll_seconds: float = Field(
        default=0.05, description="How often an idle ARQ worker looks for new jobs."
    )
    worker_concurrency: int = 8
    worker_nice: int = Field(
        default=10, description="CPU niceness of worker processes: API requests come first."
    )
    reconcile_interval_seconds: float = 300.0
    # Live changes (GET /v1/events) and webhooks.
    events_poll_seconds: float = Field(
        default=1.0, gt=0, description="How often an event stream looks for new changes."
    )
    events_heartbeat_seconds: float = Field(
        default=15.0, gt=0, description="A comment line this often keeps idle streams open."
    )
    events_max_streams_per_tenant: int = Field(
        default=20,
        ge=1,
        description="Open streams (GET /v1/events and GET /mcp together) per tenant and API "
        "process.",
    )
    mcp_stream_max_seconds: float = Field(
        default=600.0,
        gt=0,
        description="A GET /mcp event stream ends after this long (clients reconnect).",
    )
    webhook_timeout_seconds: float = Field(default=10.0, gt=0, description="A receiver's deadline.")
    webhook_max_attempts: int = Field(
        default=8, ge=1, description="Deliveries tried this often (with backoff) before dead."
    )
    webhook_poll_seconds: float = Field(
        default=1.0, gt=0, description="How often workers hand new changes to webhooks."
    )
    # Operations: metrics, traces, logs.
    metrics_token: SecretStr | None = Field(
        default=None, description="Bearer token for GET /metrics (else the admin token)."
    )
    worker_metrics_port: int = Field(
        default=0, ge=0, le=65535, description="A worker serves its metrics here (0: off)."
    )
    worker_metrics_host: str = "127.0.0.1"
    otel_endpoint: str = Field(
        default="", description="OTLP/HTTP collector (http://host:4318): tracing on when set."
    )
    otel_service_name: str = "keepmem"
    log_format: str = Field(default="json", pattern="^(json|text)$")
    log_level: str = Field(default="WARNING", pattern="^(DEBUG|INFO|WARNING|ERROR)$")
    # Shutdown (SIGTERM): time for in-flight requests and jobs to finish.
    shutdown_grace_seconds: int = Field(default=30, ge=0)
    worker_drain_seconds: int = Field(default=60, ge=0)
    fts_common_term_notes: int = Field(
        default=2000,
        description="A word found in more notes of a project than this is 'common': "
        "find's full-text stage leaves it out of long questions (it would match, "
        "and rank, a large part of a big project). The vector stage still sees it.",
    )
    term_stats_min_notes: int = Field(
        default=200,
        description="Projects from this many notes get their words counted by the worker "
        "(find's BM25 statistics); smaller ones are counted when asked.",
    )
    term_stats_max_age_seconds: float = Field(
        default=6 * 3600.0, description="How often a big project's common words are re-counted."
    )
    # Autovacuum analyzes a table after 10 % of it changed: at a million
    # notes a 20,000-note import leaves the planner with stale statistics
    # (one find planned at 50 ms instead of 6 ms, issue 36).
    planner_stats_min_rows: int = Field(
        default=1000,
        ge=0,
        description="Rows changed in a table (notes, versions, parts, vectors, edges...) "
        "since its last analyze from which a worker refreshes its planner statistics "
        "(ANALYZE); 0 leaves it to autovacuum.",
    )
    planner_stats_interval_seconds: float = Field(
        default=60.0,
        ge=10,
        description="A table is analyzed at most this often by the workers together.",
    )
    queue_name: str = Field(default="keepmem:queue", description="ARQ queue in Redis.")

    @field_validator("fetch_allow_networks", "trusted_proxies")
    @classmethod
    def _networks_are_cidrs(cls, value: list[str], info: ValidationInfo) -> list[str]:
        for network in value:
            if network == "*" and info.field_name == "trusted_proxies":
                continue  # every peer: for a proxy that hides its own address
            ipaddress.ip_network(network, strict=False)  # ValueError names the bad one
        return value

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _proxies_list(cls, value: object) -> object:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @field_validator("database_replica_urls", mode="before")
    @classmethod
    def _replica_list(cls, value: object) -> object:
        # A comma starts a new URL only where a scheme follows: a multi-host
        # URL (host1:5432,host2:5432) keeps its own commas.
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            parts = re.split(r",\s*(?=[A-Za-z][A-Za-z0-9+.-]*://)", text)
            return [part.strip() for part in parts if part.strip()]
        return value

    @model_validator(mode="after")
    def _slow_lanes_leave_slots(self) -> Settings:
        slow = self.dispatch_background_inflight + self.dispatch_remote_inflight
        if slow >= self.worker_concurrency:
            raise ValueError(
                f"dispatch_background_inflight + dispatch_remote_inflight ({slow}) must be "
                f"below worker_concurrency ({self.worker_concurrency}): slow work would "
                "fill every slot of a worker"
            )
        return self

    @field_validator("app_role")
    @classmethod
    def _role_is_identifier(cls, value: str) -> str:
        if not value.replace("_", "").isalnum() or not value[0].isalpha():
            raise ValueError("app_role must be a plain SQL identifier")
        return value

    @property
    def limits(self) -> Limits:
        return Limits(
            max_content_chars=self.max_content_chars,
            max_summary_chars=self.max_summary_chars,
            max_summary_length=self.max_summary_length,
            max_list_limit=self.max_list_limit,
            max_fts_chars=self.max_fts_chars,
            graph_extraction=self.graph_provider != "none",
            chunk_min_chars=self.chunk_min_chars if self.chunk_passages else 0,
        )

    @property
    def effective_owner_url(self) -> str | None:
        return self.owner_database_url or self.database_url

    def unset(self, *fields: str) -> list[str]:
        """The environment variables of ``fields`` that have no value."""
        return [f"KEEPMEM_{f.upper()}" for f in fields if not getattr(self, f)]


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Settings read from the environment once per process."""
    return Settings()
