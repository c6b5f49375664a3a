"""Wire schemas of coding-agent sessions (``docs/sessions-contract.md``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool

from app.wire import DateTimeText

Platform = Literal["claude-code", "codex", "gemini", "kimi", "other"]
EventKindName = Literal[
    "session_start",
    "prompt",
    "tool_use",
    "tool_result",
    "tool_failure",
    "subagent_start",
    "subagent_stop",
    "stop",
    "pre_compact",
    "post_compact",
    "session_end",
    "notification",
]
SessionIdText = Annotated[
    str,
    Field(
        min_length=1,
        max_length=200,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@+=~-]*$",
        description="The host's session id: letters, digits and . _ : @ + = ~ -.",
    ),
]
Short = Annotated[str, Field(max_length=200)]
# Long text is cut to a preview by the service, never refused: the request
# body's size limit (413) is its only bound.
LongText = str
MAX_EVENTS = 100


def _number(value: Any) -> Any:
    """JSON's integers only: 3 and 3.0, not "3" or true (pydantic's lax
    mode would take those)."""
    if isinstance(value, str | bool):
        raise ValueError("must be a JSON number")
    return value


# Integer fields that refuse text and booleans, with their bounds.
NonNegative = Annotated[int, Field(ge=0), BeforeValidator(_number)]
ResumeChars = Annotated[int, Field(ge=500, le=10_000), BeforeValidator(_number)]
TokensPerDay = Annotated[int, Field(ge=0, le=100_000_000), BeforeValidator(_number)]
CollectionLimit = Annotated[int, Field(ge=1, le=500), BeforeValidator(_number)]


class EventIn(BaseModel):
    """One hook event in the normalised shape every host is adapted to."""

    model_config = ConfigDict(extra="forbid")

    platform: Platform
    session_id: SessionIdText
    kind: EventKindName
    at: DateTimeText | None = Field(default=None, description="When it happened (ISO-8601).")
    cwd: str | None = Field(default=None, max_length=4096)
    tool_name: Short | None = None
    tool_input: dict[str, Any] | LongText | None = None
    tool_output: dict[str, Any] | list[Any] | LongText | None = None
    tool_use_id: Short | None = None
    error: LongText | None = None
    is_interrupt: StrictBool | None = None
    prompt: LongText | None = None
    message: LongText | None = None
    trigger: Short | None = None
    custom_instructions: LongText | None = None
    compact_summary: LongText | None = None
    source: Short | None = None
    reason: Short | None = None
    agent_id: Short | None = None
    agent_type: Short | None = None
    turn_id: Short | None = None
    model: Short | None = None
    original_chars: NonNegative | None = None
    original_lines: NonNegative | None = None


class EventBatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    events: list[EventIn] = Field(min_length=1, max_length=MAX_EVENTS)


class SessionState(BaseModel):
    session_id: str
    capture: bool


class IntakeOut(BaseModel):
    accepted: int = Field(description="Events stored (as notes) or counted on the session.")
    dropped: int = Field(description="Events not stored: capture off, or lifecycle noise.")
    sessions: list[SessionState]


class SessionOut(BaseModel):
    session_id: str
    platform: str
    cwd: str
    started_at: datetime
    last_event_at: datetime
    ended_at: datetime | None
    end_reason: str
    counts: dict[str, int]
    summary: str
    capture: bool
    inject: bool
    events: int
    checkpoints: int


class SessionList(BaseModel):
    sessions: list[SessionOut]


class SessionPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    capture: StrictBool | None = None
    inject: StrictBool | None = None


class ProjectSessionSettings(BaseModel):
    """A project's session settings (every field optional on write)."""

    model_config = ConfigDict(extra="forbid")

    capture: StrictBool | None = Field(default=None, description="Store hook events at all.")
    inject: StrictBool | None = Field(default=None, description="Hand resume context to hooks.")
    excludes: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = Field(
        default=None,
        max_length=50,
        description="Path globs whose content is never stored (default: "
        "`*.env*`, `*secret*`, `secrets/`).",
    )
    resume_chars: ResumeChars | None = None
    llm_tokens_per_day: TokensPerDay | None = None


class TimelineItem(BaseModel):
    id: str
    kind: str
    at: datetime
    summary: str
    tags: dict[str, Any]


class Timeline(BaseModel):
    session_id: str
    items: list[TimelineItem]
    next_cursor: str | None


class CheckpointOut(BaseModel):
    id: str
    at: datetime
    trigger: str
    text: str = Field(description="Summary, decisions, open tasks and files changed.")


class CheckpointList(BaseModel):
    checkpoints: list[CheckpointOut]


class PatternOut(BaseModel):
    kind: str
    template: str
    example: str
    count: int
    sessions: int
    session_ids: list[str]
    files: list[str]
    first_seen: datetime
    last_seen: datetime


class PatternList(BaseModel):
    patterns: list[PatternOut]


class ResumeOut(BaseModel):
    context: str
    chars: int
    inject: bool


class CheckpointRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    note: str | None = Field(default=None, max_length=10_000, description="What to record.")


class CollectionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(default="", max_length=2000, description="Words to find (empty: all).")
    tags: dict[Annotated[str, Field(max_length=200)], Annotated[str, Field(max_length=500)]] = (
        Field(default_factory=dict, max_length=20)
    )
    since: str | None = Field(
        default=None,
        max_length=64,
        description="Only notes since then: an ISO-8601 instant or a duration back (P7D).",
    )
    limit: CollectionLimit = 50
    description: str = Field(default="", max_length=500)


class CollectionOut(CollectionIn):
    name: str


class CollectionItem(BaseModel):
    id: str
    summary: str
    tags: dict[str, Any]
    created_at: str
    score: float | None = None


class CollectionRun(BaseModel):
    name: str
    items: list[CollectionItem]


class CollectionList(BaseModel):
    collections: list[CollectionOut]


class SpendOut(BaseModel):
    day: str
    calls: int
    tokens_in: int
    tokens_out: int
    refused: int
    budget: int | None
