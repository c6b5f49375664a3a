"""ORM rows. These are storage classes only; wire schemas live in each domain.

Every tenant table has ``tenant_id`` leading its primary key, so the schema
can be distributed by tenant (Citus) and every index is tenant-local.
Relationships are not declared: repositories write explicit queries.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pgvector.sqlalchemy import Vector
from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TSVECTOR, UUID
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

TS = DateTime(timezone=True)
ID_TEXT = Text().with_variant(String(collation="C"), "postgresql")


class Base(DeclarativeBase):
    pass


class Tenant(Base):
    __tablename__ = "tenants"

    id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), primary_key=True, server_default=text("gen_random_uuid()")
    )
    name: Mapped[str] = mapped_column(Text, unique=True)
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    disabled_at: Mapped[datetime | None] = mapped_column(TS)
    # Quotas the operator sets (None: unlimited).
    quota_notes: Mapped[int | None] = mapped_column(BigInteger)
    quota_bytes: Mapped[int | None] = mapped_column(BigInteger)
    quota_requests_per_day: Mapped[int | None] = mapped_column(BigInteger)
    quota_jobs_per_day: Mapped[int | None] = mapped_column(BigInteger)


class Project(Base):
    __tablename__ = "projects"
    __table_args__ = (
        ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE"),
        Index("uq_projects_slug", "tenant_id", "slug", unique=True),
    )

    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), primary_key=True, server_default=text("gen_random_uuid()")
    )
    slug: Mapped[str] = mapped_column(Text)
    settings: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    term_stats_at: Mapped[datetime | None] = mapped_column(TS)
    term_stats_notes: Mapped[int | None] = mapped_column(Integer)
    term_stats_avgdl: Mapped[float | None] = mapped_column(Float)
    # Notes not updated for this many days are deleted by the sweeper.
    retention_days: Mapped[int | None] = mapped_column(Integer)


def _project_fk() -> ForeignKeyConstraint:
    return ForeignKeyConstraint(
        ["tenant_id", "project_id"], ["projects.tenant_id", "projects.id"], ondelete="CASCADE"
    )


class TermStat(Base):
    """A lexeme found in many of a project's notes (see find's full-text stage)."""

    __tablename__ = "term_stats"
    __table_args__ = (_project_fk(),)

    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    project_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    lexeme: Mapped[str] = mapped_column(Text, primary_key=True)
    ndoc: Mapped[int] = mapped_column(Integer)
    common: Mapped[bool] = mapped_column(Boolean)  # left out of questions


class GraphEntity(Base):
    """Someone or something notes mention (graph extraction)."""

    __tablename__ = "entities"
    __table_args__ = (_project_fk(),)

    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    project_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    key: Mapped[str] = mapped_column(ID_TEXT, primary_key=True)  # kind:casefolded name
    name: Mapped[str] = mapped_column(Text)
    kind: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())


class Mention(Base):
    __tablename__ = "mentions"
    __table_args__ = (_project_fk(),)

    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    project_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    note_id: Mapped[str] = mapped_column(ID_TEXT, primary_key=True)
    entity_key: Mapped[str] = mapped_column(ID_TEXT, primary_key=True)
    span_start: Mapped[int] = mapped_column(Integer, primary_key=True)
    span_end: Mapped[int] = mapped_column(Integer)


class GraphRelation(Base):
    __tablename__ = "relations"
    __table_args__ = (_project_fk(),)

    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    project_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    note_id: Mapped[str] = mapped_column(ID_TEXT, primary_key=True)
    subject_key: Mapped[str] = mapped_column(ID_TEXT, primary_key=True)
    predicate: Mapped[str] = mapped_column(Text, primary_key=True)
    object_key: Mapped[str] = mapped_column(ID_TEXT, primary_key=True)
    span_start: Mapped[int] = mapped_column(Integer)
    span_end: Mapped[int] = mapped_column(Integer)


class Blob(Base):
    """An image waiting for its OCR job (deleted when the job is done)."""

    __tablename__ = "blobs"
    __table_args__ = (_project_fk(),)

    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    project_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    job_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    note_id: Mapped[str] = mapped_column(ID_TEXT)
    data: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())


class ApiKey(Base):
    __tablename__ = "api_keys"
    __table_args__ = (ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE"),)

    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), primary_key=True, server_default=text("gen_random_uuid()")
    )
    name: Mapped[str] = mapped_column(Text)
    prefix: Mapped[str] = mapped_column(Text)
    key_hash: Mapped[bytes] = mapped_column(LargeBinary, unique=True)
    scopes: Mapped[list[str]] = mapped_column(ARRAY(Text))
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    expires_at: Mapped[datetime | None] = mapped_column(TS)
    revoked_at: Mapped[datetime | None] = mapped_column(TS)
    last_used_at: Mapped[datetime | None] = mapped_column(TS)
    # A narrowed key: one project, a tag scope ("key=value" terms), and the
    # credential it was minted from ("key:<id>" or "grant:<id>").
    project_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    tag_scope: Mapped[list[str]] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))
    parent: Mapped[str | None] = mapped_column(Text)


def _note_fk() -> ForeignKeyConstraint:
    return ForeignKeyConstraint(
        ["tenant_id", "project_id", "note_id"],
        ["notes.tenant_id", "notes.project_id", "notes.id"],
        ondelete="CASCADE",
    )


class Note(Base):
    __tablename__ = "notes"
    __table_args__ = (
        ForeignKeyConstraint(
            ["tenant_id", "project_id"], ["projects.tenant_id", "projects.id"], ondelete="CASCADE"
        ),
        Index("ix_notes_updated", "tenant_id", "project_id", "updated_at"),
        Index("ix_notes_created", "tenant_id", "project_id", "created_at"),
        # The timeline find reads context from (migration 0010).
        Index(
            "ix_notes_timeline",
            "tenant_id",
            "project_id",
            "created_at",
            text("keepmem_natural_key(id)"),
        ),
        Index("ix_notes_accessed", "tenant_id", "project_id", "accessed_at"),
        Index("ix_notes_fts", "fts", postgresql_using="gin"),
        Index("ix_notes_tag_index", "tag_index", postgresql_using="gin"),
    )

    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    project_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    id: Mapped[str] = mapped_column(ID_TEXT, primary_key=True)
    summary: Mapped[str] = mapped_column(Text)
    tags: Mapped[dict[str, Any]] = mapped_column(JSONB)
    # "key" and "key=value" (casefolded) for every user tag: one GIN index
    # serves both tag filters and tag-key presence filters.
    tag_index: Mapped[list[str]] = mapped_column(ARRAY(Text))
    content_hash: Mapped[str | None] = mapped_column(Text)
    content_type: Mapped[str | None] = mapped_column(Text)
    source: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(TS)
    updated_at: Mapped[datetime] = mapped_column(TS)
    accessed_at: Mapped[datetime] = mapped_column(TS)
    # Original content is kept only while background work still needs it.
    pending_content: Mapped[str | None] = mapped_column(Text)
    expires_at: Mapped[datetime | None] = mapped_column(TS)  # deleted by the sweeper after
    # Deferred: only full-text search reads it; loading it on every get is waste.
    fts: Mapped[Any] = mapped_column(TSVECTOR, deferred=True)


class NoteVersion(Base):
    __tablename__ = "note_versions"
    __table_args__ = (_note_fk(),)

    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    project_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    note_id: Mapped[str] = mapped_column(ID_TEXT, primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    summary: Mapped[str] = mapped_column(Text)
    tags: Mapped[dict[str, Any]] = mapped_column(JSONB)
    content_hash: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(TS)
    updated_at: Mapped[datetime] = mapped_column(TS)
    archived_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    fts: Mapped[Any] = mapped_column(TSVECTOR)


class Part(Base):
    __tablename__ = "parts"
    __table_args__ = (_note_fk(),)

    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    project_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    note_id: Mapped[str] = mapped_column(ID_TEXT, primary_key=True)
    part_num: Mapped[int] = mapped_column(Integer, primary_key=True)
    summary: Mapped[str] = mapped_column(Text)
    tags: Mapped[dict[str, Any]] = mapped_column(JSONB)
    content_hash: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    fts: Mapped[Any] = mapped_column(TSVECTOR)
    # A passage's characters in the note's normalised text, and the pages,
    # slides, sheet or cue times they cover (none for analyze's parts).
    span_start: Mapped[int | None] = mapped_column(Integer)
    span_end: Mapped[int | None] = mapped_column(Integer)
    locator: Mapped[dict[str, Any] | None] = mapped_column(JSONB)


class NoteText(Base):
    """A note's normalised text, compressed, when its project keeps text."""

    __tablename__ = "note_texts"
    __table_args__ = (_note_fk(),)

    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    project_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    note_id: Mapped[str] = mapped_column(ID_TEXT, primary_key=True)
    sha256: Mapped[str] = mapped_column(Text)
    chars: Mapped[int] = mapped_column(Integer)
    data: Mapped[bytes] = mapped_column(LargeBinary)
    segments: Mapped[list[Any]] = mapped_column(JSONB, server_default="[]")
    updated_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())


class Citation(Base):
    """A span of a note at one version, quoted exactly (app.grounding)."""

    __tablename__ = "citations"
    __table_args__ = (
        ForeignKeyConstraint(
            ["tenant_id", "project_id"], ["projects.tenant_id", "projects.id"], ondelete="CASCADE"
        ),
        Index("ix_citations_note", "tenant_id", "project_id", "note_id", "created_at"),
    )

    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    project_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    id: Mapped[str] = mapped_column(Text, primary_key=True)
    note_id: Mapped[str] = mapped_column(ID_TEXT)
    version: Mapped[int] = mapped_column(Integer)
    part_num: Mapped[int | None] = mapped_column(Integer)
    span_start: Mapped[int] = mapped_column(Integer)
    span_end: Mapped[int] = mapped_column(Integer)
    quote: Mapped[str] = mapped_column(Text)
    before: Mapped[str] = mapped_column(Text, server_default="")
    after: Mapped[str] = mapped_column(Text, server_default="")
    text_sha256: Mapped[str] = mapped_column(Text)
    source_uri: Mapped[str | None] = mapped_column(Text)
    locator: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default="{}")
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())


class Embedding(Base):
    """A vector for a note, one of its parts or one of its versions.

    ``embedding`` has no fixed dimension; an HNSW index per dimension is a
    partial expression index (``embedding::vector(N) WHERE dim = N``).
    """

    __tablename__ = "embeddings"
    __table_args__ = (_note_fk(),)

    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    project_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    note_id: Mapped[str] = mapped_column(ID_TEXT, primary_key=True)
    kind: Mapped[str] = mapped_column(Text, primary_key=True)  # note | part | version
    ref: Mapped[int] = mapped_column(Integer, primary_key=True)  # part_num / version / 0
    model: Mapped[str] = mapped_column(Text, primary_key=True)
    dim: Mapped[int] = mapped_column(Integer)
    content_hash: Mapped[str | None] = mapped_column(Text)
    embedding: Mapped[Any] = mapped_column(Vector())
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())


class Edge(Base):
    __tablename__ = "edges"
    __table_args__ = (
        ForeignKeyConstraint(
            ["tenant_id", "project_id"], ["projects.tenant_id", "projects.id"], ondelete="CASCADE"
        ),
        Index("ix_edges_target", "tenant_id", "project_id", "target_id"),
    )

    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    project_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    source_id: Mapped[str] = mapped_column(ID_TEXT, primary_key=True)
    predicate: Mapped[str] = mapped_column(Text, primary_key=True)
    target_id: Mapped[str] = mapped_column(ID_TEXT, primary_key=True)
    origin: Mapped[str] = mapped_column(Text)  # tag | graph
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())


class Job(Base):
    """Job outbox: written in the same transaction as the change that needs it."""

    __tablename__ = "jobs"
    __table_args__ = (
        ForeignKeyConstraint(
            ["tenant_id", "project_id"], ["projects.tenant_id", "projects.id"], ondelete="CASCADE"
        ),
        Index(
            "ix_jobs_ready",
            "next_run_at",
            postgresql_where=text("status = 'pending'"),
        ),
        Index("ix_jobs_note", "tenant_id", "project_id", "note_id", "kind"),
        Index("ix_jobs_public_id", "tenant_id", "public_id", unique=True),
        Index(
            "ix_jobs_open",
            "kind",
            "status",
            "created_at",
            postgresql_where=text("status IN ('pending', 'dispatched', 'running', 'dead')"),
        ),
    )

    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    id: Mapped[int] = mapped_column(BigInteger, Identity(always=False), primary_key=True)
    # What the API shows: random, so no tenant can count another's work by it.
    public_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), server_default=text("gen_random_uuid()")
    )
    project_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True))
    kind: Mapped[str] = mapped_column(Text)
    note_id: Mapped[str | None] = mapped_column(ID_TEXT)
    payload: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    # pending -> dispatched -> running -> done | pending (retry) | dead ;
    # superseded when newer work for the same note replaces it.
    status: Mapped[str] = mapped_column(Text, server_default=text("'pending'"))
    priority: Mapped[int] = mapped_column(Integer, server_default=text("5"))
    attempts: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    max_attempts: Mapped[int] = mapped_column(Integer, server_default=text("5"))
    next_run_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    claimed_at: Mapped[datetime | None] = mapped_column(TS)
    last_error: Mapped[str | None] = mapped_column(Text)
    dead_lettered_at: Mapped[datetime | None] = mapped_column(TS)
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    claim_token: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    heartbeat_at: Mapped[datetime | None] = mapped_column(TS)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    finished_at: Mapped[datetime | None] = mapped_column(TS)


class Change(Base):
    """Mutation feed behind keep's ``/v1/export/changes``."""

    __tablename__ = "changes"
    __table_args__ = (
        ForeignKeyConstraint(
            ["tenant_id", "project_id"], ["projects.tenant_id", "projects.id"], ondelete="CASCADE"
        ),
        Index("ix_changes_project", "tenant_id", "project_id", "id"),
        Index("ix_changes_public_id", "tenant_id", "public_id", unique=True),
    )

    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    # The order of the feed; never shown (a sequence every tenant shares).
    id: Mapped[int] = mapped_column(BigInteger, Identity(always=False), primary_key=True)
    # What the API shows (event ids, cursors): random, as Job.public_id.
    public_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), server_default=text("gen_random_uuid()")
    )
    project_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True))
    mutation: Mapped[str] = mapped_column(Text)
    entity_id: Mapped[str] = mapped_column(ID_TEXT)
    # What it means to a watcher (put, tag, delete ...; app.kit.changes);
    # NULL for bookkeeping rows only keep's export reads.
    kind: Mapped[str | None] = mapped_column(Text)
    payload: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())


class Webhook(Base):
    """A project's subscriber: its changes are POSTed, signed, to ``url``."""

    __tablename__ = "webhooks"
    __table_args__ = (
        ForeignKeyConstraint(
            ["tenant_id", "project_id"], ["projects.tenant_id", "projects.id"], ondelete="CASCADE"
        ),
        Index("ix_webhooks_project", "tenant_id", "project_id"),
    )

    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), primary_key=True, server_default=text("gen_random_uuid()")
    )
    project_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True))
    url: Mapped[str] = mapped_column(Text)
    secret: Mapped[bytes] = mapped_column(LargeBinary)  # sealed (app.sealing)
    kinds: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=text("'{}'"))
    tags: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    description: Mapped[str] = mapped_column(Text, server_default=text("''"))
    # The last change handed to the job outbox as a delivery.
    cursor: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    active: Mapped[bool] = mapped_column(Boolean, server_default=text("true"))
    created_by: Mapped[str] = mapped_column(Text, server_default=text("''"))
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())


class AuditLog(Base):
    """Append-only for the application (migration 0012); no foreign key to
    tenants, so a tenant's erasure leaves the record that it was erased."""

    __tablename__ = "audit_log"
    __table_args__ = (Index("ix_audit_public_id", "tenant_id", "public_id", unique=True),)

    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    # The order of the trail; never shown (a sequence every tenant shares).
    id: Mapped[int] = mapped_column(BigInteger, Identity(always=False), primary_key=True)
    # What the API shows (entry ids, cursors): random, as Job.public_id.
    public_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), server_default=text("gen_random_uuid()")
    )
    actor: Mapped[str] = mapped_column(Text)
    action: Mapped[str] = mapped_column(Text)
    target: Mapped[str | None] = mapped_column(Text)
    detail: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    request_id: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    project_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    outcome: Mapped[str] = mapped_column(Text, server_default=text("'ok'"))


class OAuthKey(Base):
    """A token-signing key; the private half is encrypted with the server secret."""

    __tablename__ = "oauth_keys"

    kid: Mapped[str] = mapped_column(Text, primary_key=True)
    private_key: Mapped[bytes] = mapped_column(LargeBinary)
    public_jwk: Mapped[dict[str, Any]] = mapped_column(JSONB)
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    retired_at: Mapped[datetime | None] = mapped_column(TS)


class OAuthClient(Base):
    """A registered client: public (dynamic registration, no tenant) or a
    tenant's service account (client credentials, fixed project and scopes)."""

    __tablename__ = "oauth_clients"

    client_id: Mapped[str] = mapped_column(Text, primary_key=True)
    tenant_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    secret_hash: Mapped[bytes | None] = mapped_column(LargeBinary)
    client_metadata: Mapped[dict[str, Any]] = mapped_column("metadata", JSONB)
    project_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    scopes: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=text("'{}'"))
    tag_scope: Mapped[list[str]] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    revoked_at: Mapped[datetime | None] = mapped_column(TS)
    # When it first completed a grant; registered clients never used are pruned.
    used_at: Mapped[datetime | None] = mapped_column(TS)


class OAuthCode(Base):
    __tablename__ = "oauth_codes"

    code_hash: Mapped[bytes] = mapped_column(LargeBinary, primary_key=True)
    client_id: Mapped[str] = mapped_column(Text)
    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True))
    key_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    project_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True))
    scopes: Mapped[list[str]] = mapped_column(ARRAY(Text))
    tag_scope: Mapped[list[str]] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))
    redirect_uri: Mapped[str | None] = mapped_column(Text)
    code_challenge: Mapped[str | None] = mapped_column(Text)
    code_challenge_method: Mapped[str | None] = mapped_column(Text)
    resource: Mapped[str | None] = mapped_column(Text)
    nonce: Mapped[str | None] = mapped_column(Text)
    expires_at: Mapped[datetime] = mapped_column(TS)
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())


class OAuthGrant(Base):
    """One issued token family: the refresh token, and the ``gid`` in every
    access token minted under it."""

    __tablename__ = "oauth_grants"

    id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), primary_key=True, server_default=text("gen_random_uuid()")
    )
    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True))
    client_id: Mapped[str] = mapped_column(Text)
    key_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    project_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True))
    scopes: Mapped[list[str]] = mapped_column(ARRAY(Text))
    tag_scope: Mapped[list[str]] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))
    resource: Mapped[str | None] = mapped_column(Text)
    refresh_hash: Mapped[bytes | None] = mapped_column(LargeBinary, unique=True)
    refresh_expires_at: Mapped[datetime | None] = mapped_column(TS)
    access_expires_at: Mapped[datetime] = mapped_column(TS)
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    revoked_at: Mapped[datetime | None] = mapped_column(TS)


class OAuthIssuer(Base):
    """An external OpenID Connect issuer a tenant trusts to mint access."""

    __tablename__ = "oauth_issuers"

    id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), primary_key=True, server_default=text("gen_random_uuid()")
    )
    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True))
    issuer: Mapped[str] = mapped_column(Text)
    audience: Mapped[str] = mapped_column(Text)
    jwks: Mapped[dict[str, Any]] = mapped_column(JSONB)
    project_claim: Mapped[str | None] = mapped_column(Text)
    default_project: Mapped[str] = mapped_column(Text, server_default=text("'default'"))
    scope_claim: Mapped[str] = mapped_column(Text, server_default=text("'scope'"))
    default_scopes: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=text("'{read}'"))
    tag_claims: Mapped[dict[str, str]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())


TENANT_TABLES = (
    "projects",
    "api_keys",
    "notes",
    "note_versions",
    "parts",
    "embeddings",
    "edges",
    "jobs",
    "changes",
    "audit_log",
    "term_stats",
    "blobs",
    "entities",
    "mentions",
    "relations",
    "webhooks",
    "note_texts",
    "citations",
)
