"""Wire schemas of memory formation: threads of messages in, memories out."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictInt

from app.kit.storable import json_integer
from app.wire import MAX_OFFSET

# An integer as JSON Schema means it: 5 and 5.0, never "5".
Budget = Annotated[StrictInt, Field(ge=0, le=MAX_OFFSET), BeforeValidator(json_integer)]

MAX_MESSAGES = 100
THREAD_ID = r"^[A-Za-z0-9][A-Za-z0-9._:@+=~-]*$"
ROLES = ("user", "assistant", "system", "tool")
Kind = Literal["fact", "preference", "decision", "task", "event"]


class MessageIn(BaseModel):
    """One message of a conversation."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant", "system", "tool"]
    content: str = Field(min_length=1, description="The message's text.")
    name: str | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        pattern=r"^[^\x00-\x1f]+$",
        description="Who spoke (a person's name): the speaker, and the subject of what they "
        "say of themselves. Default: the thread's user_id for user messages, else the role.",
    )
    time: str | None = Field(
        default=None,
        max_length=64,
        description="When it was said (ISO-8601). Default: when it arrives.",
    )
    tags: dict[str, Any] | None = Field(default=None, description="Tags for the message's note.")


class MessageBatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    messages: list[MessageIn] = Field(min_length=1, max_length=MAX_MESSAGES)
    user_id: str | None = Field(default=None, min_length=1, max_length=200)
    agent_id: str | None = Field(default=None, min_length=1, max_length=200)
    infer: StrictBool = Field(
        default=True,
        description="Extract memories from the messages (false: store the messages only).",
    )


class IntakeOut(BaseModel):
    thread_id: str
    messages: list[str] = Field(description="The messages' note ids, in the order sent.")
    extraction: Literal["queued", "joined", "off"] = Field(
        description="queued: a job will read the batch; joined: a job already waiting for "
        "the thread will read it with the others; off: infer was false."
    )


class MemoryOut(BaseModel):
    id: str
    kind: str
    subject: str
    attribute: str
    value: str
    statement: str
    confidence: float
    certainty: str = Field(
        description="fact (a model's reading, or written by the agent), or candidate (a phrase "
        "match of the offline rules: low confidence, never to be taken as a fact)."
    )
    negated: bool = Field(description="A retraction: the subject no longer <attribute> <value>.")
    current: bool
    valid_at: str = Field(description="When the belief began (stated time, else when said).")
    superseded_by: str | None = None
    superseded_at: str | None = None
    sources: list[str] = Field(description="The messages (note ids) it came from.")
    thread_id: str = ""
    user_id: str = ""
    agent_id: str = ""
    updated_at: str


class MemoryList(BaseModel):
    memories: list[MemoryOut]
    as_of: str | None = None


class SourceOut(BaseModel):
    id: str
    summary: str
    created_at: str
    exists: bool


class VersionOut(BaseModel):
    version: int
    statement: str
    at: str


class MemoryDetail(MemoryOut):
    versions: list[VersionOut] = Field(description="Earlier wordings of this memory, newest first.")
    source_messages: list[SourceOut]
    history: list[MemoryOut] = Field(
        description="Every memory of the same slot (subject, attribute), oldest first."
    )


class RememberIn(BaseModel):
    """A memory the agent wrote itself: no extraction runs; it is reconciled
    like an extracted one (a restatement updates instead of adding)."""

    model_config = ConfigDict(extra="forbid")

    statement: str = Field(min_length=1, max_length=1000, description="One sentence.")
    subject: str | None = Field(default=None, min_length=1, max_length=200)
    attribute: str | None = Field(default=None, min_length=1, max_length=64)
    value: str | None = Field(default=None, min_length=1, max_length=500)
    kind: Kind = "fact"
    single: StrictBool | None = Field(
        default=None,
        description="The attribute holds one value at a time (a new one supersedes). "
        "Default: true for kind fact, false otherwise.",
    )
    negated: StrictBool = False
    valid_at: str | None = Field(default=None, max_length=64)
    user_id: str | None = Field(default=None, max_length=200)
    agent_id: str | None = Field(default=None, max_length=200)
    thread_id: str | None = Field(default=None, max_length=200, pattern=THREAD_ID)
    tags: dict[str, Any] | None = None


class RememberOut(BaseModel):
    op: Literal["add", "supersede", "update", "noop"]
    memory: MemoryOut
    superseded: list[str] = Field(description="Memories this one replaced.")


class ThreadOut(BaseModel):
    id: str
    user_id: str
    agent_id: str
    created_at: str
    last_message_at: str
    messages: int
    extracted: int = Field(description="Messages extraction has read.")
    waiting: int = Field(description="Messages waiting for extraction.")
    memories_made: int


class ThreadDeleted(BaseModel):
    thread_id: str
    messages: int = Field(description="Message notes deleted.")
    memories: int = Field(description="Memory notes deleted (with memories=true).")


class ThreadList(BaseModel):
    threads: list[ThreadOut]


class MessageOut(BaseModel):
    id: str
    role: str
    speaker: str
    content: str
    created_at: str


class MessageList(BaseModel):
    messages: list[MessageOut]
    next_cursor: str | None = None


class ContextMessage(BaseModel):
    id: str
    summary: str
    created_at: str
    score: float


class ContextOut(BaseModel):
    thread_id: str
    memories: list[MemoryOut]
    messages: list[ContextMessage]
    context: str = Field(description="Both, as one block of text to put in a prompt.")
    tokens: int
    truncated: bool


class MemorySettingsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    llm_tokens_per_day: Budget | None = Field(
        default=None,
        description="The project's extraction budget (tokens per UTC day); at most the "
        "server's. Past it, batches are read by the rules.",
    )


class MemorySettingsOut(BaseModel):
    llm_tokens_per_day: int
    provider: str = Field(description="The server's extraction model, or none (rules only).")


class SpendOut(BaseModel):
    day: str
    calls: int
    tokens_in: int
    tokens_out: int
    refused: int = Field(description="Batches read by the rules because the budget was spent.")
    budget: int
