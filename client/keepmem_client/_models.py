"""Typed answers of the keepmem API (unknown fields are kept, never an error:
a newer server may send more)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow")


class Note(_Model):
    id: str
    summary: str
    tags: dict[str, Any] = Field(default_factory=dict)
    created_at: str | None = None
    updated_at: str | None = None
    changed: bool | None = None
    pending: list[str] = Field(default_factory=list)


class ScoredNote(Note):
    score: float
    citation: Citation | None = None  # with find(cite=True); None where no text is kept


class NotePage(_Model):
    notes: list[Note]
    count: int
    next_cursor: str | None = None


class DeepGroup(_Model):
    id: str
    items: list[ScoredNote]


class SearchResult(_Model):
    notes: list[ScoredNote]
    deep_groups: list[DeepGroup] = Field(default_factory=list)
    mode: str
    pending_embedding: int = 0
    citation_warning: str | None = None


class CompactLine(_Model):
    id: str
    summary: str
    date: str
    score: float | None = None


class CompactResult(_Model):
    results: list[CompactLine]
    mode: str
    pending_embedding: int = 0
    tokens: int
    truncated: bool


class Version(_Model):
    offset: int
    summary: str
    date: str
    tags: dict[str, Any] = Field(default_factory=dict)


class VersionList(_Model):
    versions: list[Version]
    count: int


class Deleted(_Model):
    deleted: str | bool
    reverted: bool = False
    note: Note | None = None


class Job(_Model):
    id: str
    kind: str
    note_id: str | None = None
    status: str
    attempts: int = 0
    last_error: str | None = None


class JobPage(_Model):
    jobs: list[Job]
    next_before: str | None = None


class BatchResult(_Model):
    status: int
    note: Note | None = None
    error: str | None = None
    code: str | None = None


class BatchOut(_Model):
    results: list[BatchResult]
    stored: int
    failed: int


class ImportResult(_Model):
    imported: int
    versions: int
    parts: int
    skipped: int
    queued: int


class Key(_Model):
    id: str
    name: str
    prefix: str
    scopes: list[str]
    revoked_at: str | None = None
    key: str | None = Field(default=None, description="The full key: only when just created.")


class Tenant(_Model):
    id: str
    name: str


class NewTenant(_Model):
    tenant: Tenant
    api_key: Key


class SessionState(_Model):
    session_id: str
    capture: bool


class IntakeResult(_Model):
    accepted: int
    dropped: int
    sessions: list[SessionState] = Field(default_factory=list)


class Session(_Model):
    """A coding-agent session as keepmem recorded it."""

    session_id: str
    platform: str
    cwd: str = ""
    started_at: str
    last_event_at: str
    ended_at: str | None = None
    end_reason: str = ""
    counts: dict[str, int] = Field(default_factory=dict)
    summary: str = ""
    capture: bool = True
    inject: bool = True
    events: int = 0
    checkpoints: int = 0


class TimelineItem(_Model):
    id: str
    kind: str
    at: str
    summary: str
    tags: dict[str, Any] = Field(default_factory=dict)


class SessionTimeline(_Model):
    session_id: str
    items: list[TimelineItem]
    next_cursor: str | None = None


class Checkpoint(_Model):
    id: str
    at: str
    trigger: str
    text: str


class Pattern(_Model):
    """Something that recurs across sessions: an error, a fix, a decision."""

    kind: str
    template: str
    example: str
    count: int
    sessions: int
    session_ids: list[str] = Field(default_factory=list)
    files: list[str] = Field(default_factory=list)
    first_seen: str
    last_seen: str


class ResumeContext(_Model):
    context: str
    chars: int
    inject: bool


class SessionSettings(_Model):
    capture: bool
    inject: bool
    excludes: list[str] = Field(default_factory=list)
    resume_chars: int
    llm_tokens_per_day: int | None = None


class ProjectSettings(_Model):
    """Every setting of a project, the server's defaults filled in."""

    project: str
    sanitize: bool
    decay_half_life_days: float
    auto_tag: bool
    keep_text: bool = False
    sessions: SessionSettings
    memories: dict[str, Any] = Field(default_factory=dict)


class Collection(_Model):
    """A saved query."""

    name: str
    query: str = ""
    tags: dict[str, str] = Field(default_factory=dict)
    since: str | None = None
    limit: int = 50
    description: str = ""


class CollectionItem(_Model):
    id: str
    summary: str
    tags: dict[str, Any] = Field(default_factory=dict)
    created_at: str
    score: float | None = None


class CollectionRun(_Model):
    name: str
    items: list[CollectionItem]


# -- threads of messages and the memories formed from them ---------------------------


class MessagesAdded(_Model):
    """A batch of messages stored: their note ids and what extraction will do."""

    thread_id: str
    messages: list[str]
    extraction: str = Field(description="queued, joined (a waiting job takes it along) or off.")


class Thread(_Model):
    id: str
    user_id: str = ""
    agent_id: str = ""
    created_at: str
    last_message_at: str
    messages: int
    extracted: int = 0
    waiting: int = Field(default=0, description="Messages not yet read by extraction.")
    memories_made: int = 0


class ThreadDeleted(_Model):
    thread_id: str
    messages: int = Field(description="Message notes deleted.")
    memories: int = Field(description="Memory notes deleted (with memories=True).")


class Message(_Model):
    id: str
    role: str
    speaker: str
    content: str
    created_at: str


class MessagePage(_Model):
    messages: list[Message]
    next_cursor: str | None = None


class Memory(_Model):
    """A belief formed from messages or written by the agent; ``current``
    until a newer memory of its slot supersedes it (nothing is deleted)."""

    id: str
    kind: str
    subject: str
    attribute: str
    value: str
    statement: str
    confidence: float
    certainty: str = Field(description="fact, or candidate (an unconfirmed rule match).")
    negated: bool = False
    current: bool
    valid_at: str
    superseded_by: str | None = None
    superseded_at: str | None = None
    sources: list[str] = Field(default_factory=list)
    thread_id: str = ""
    user_id: str = ""
    agent_id: str = ""
    updated_at: str


class MemoryVersion(_Model):
    version: int
    statement: str
    at: str


class MemorySource(_Model):
    id: str
    summary: str
    created_at: str
    exists: bool


class MemoryDetail(Memory):
    versions: list[MemoryVersion] = Field(default_factory=list)
    source_messages: list[MemorySource] = Field(default_factory=list)
    history: list[Memory] = Field(default_factory=list)


class Remembered(_Model):
    op: str = Field(description="add, supersede, update or noop.")
    memory: Memory
    superseded: list[str] = Field(default_factory=list)


class ContextMessage(_Model):
    id: str
    summary: str
    created_at: str
    score: float


class ThreadContext(_Model):
    thread_id: str
    memories: list[Memory]
    messages: list[ContextMessage]
    context: str
    tokens: int
    truncated: bool


class MemorySettings(_Model):
    llm_tokens_per_day: int
    provider: str


class MemorySpend(_Model):
    day: str
    calls: int
    tokens_in: int
    tokens_out: int
    refused: int
    budget: int


# -- grounding: citations of passages, re-cutting, crawls ------------------------------


class Citation(_Model):
    """A span of a note's text, quoted exactly, with the sha256 of the whole
    text it was read from (``verify`` re-reads it). ``stored`` is false for
    the citations ``find(cite=True)`` returns (``verify_citation`` checks
    them as given)."""

    id: str = ""
    note: str
    version: int = 0
    part: int | None = None
    start: int
    end: int
    quote: str
    before: str = ""
    after: str = ""
    text_sha256: str
    source_uri: str | None = None
    locator: dict[str, Any] = Field(
        default_factory=dict, description="page (page_end), slide, sheet, start_s / end_s."
    )
    created_at: str | None = None
    stored: bool = True


class CitationPage(_Model):
    citations: list[Citation]
    next_cursor: str | None = None


class CitationVerdict(_Model):
    """What verify found: ``valid``, ``changed`` (see ``diagnosis``), ``gone``
    (the note was deleted) or ``unverifiable`` (its project keeps no text)."""

    status: str
    diagnosis: str
    quote_in_place: bool = False
    found_at: list[int] | None = None
    current_sha256: str | None = None
    current_version: int | None = None
    citation: Citation

    @property
    def valid(self) -> bool:
        return self.status == "valid"


class RechunkResult(_Model):
    queued: int
    without_text: int
    next_after: str | None = None


class CrawlLimits(_Model):
    max_depth: int
    max_pages: int
    max_bytes: int


class CrawlStarted(_Model):
    """A crawl queued: its first job (each job's result names the next)."""

    job_id: str
    uri: str
    limits: CrawlLimits
    path_prefix: str | None = None


class DistilledMemory(_Model):
    id: str
    statement: str
    kind: str
    subject: str
    tags: dict[str, Any] = Field(default_factory=dict)


class ProvenanceItem(_Model):
    """A source a distilled memory stands on: its ``derived_from`` edge's
    target (``ID@P{N}`` or a note id), and the citation made of it."""

    target: str
    note: str
    part: int | None = None
    citation: str | None = None
    quote: str | None = None
    summary: str | None = None
    locator: dict[str, Any] = Field(default_factory=dict)


class Distilled(_Model):
    """A memory made from sources: ``op`` as ``remember``'s, its provenance,
    and who wrote it (``rendered_by``: ``agent`` or the server's model)."""

    op: str
    memory: DistilledMemory
    provenance: list[ProvenanceItem] = Field(default_factory=list)
    rendered_by: str
    prompt: str
