"""Wire shapes of the mem0-compatible API: what mem0's hosted client sends
and reads back. Parameters keepmem cannot honour are in the schema so that
a request naming them is answered with a 400 that names them (see
``service.refuse_unsupported``), not with a generic validation error."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
)

from app.kit.storable import json_integer
from app.wire import not_text

MAX_BATCH = 1000  # mem0's own limit for batch update and delete
MAX_TEXT = 1000  # a memory's statement (keepmem's limit)

Entity = Annotated[StrictStr | None, Field(min_length=1, max_length=200)]
Metadata = Annotated[
    dict[str, Any] | None,
    Field(description="Any JSON object; returned as given (at most 4 KB as JSON)."),
]
Filters = Annotated[
    dict[str, Any] | None,
    Field(
        description="mem0's filter language: AND / OR / NOT over user_id, agent_id, app_id, "
        "run_id (eq, ne, in, nin, '*'), created_at / updated_at (gt, gte, lt, lte, eq, ne), "
        "keywords (contains, icontains), metadata (top-level equality), memory_ids.",
    ),
]
Unsupported = Annotated[Any, Field(description="Not supported by keepmem: refused (400) when set.")]
Tenancy = Annotated[
    StrictStr | None,
    Field(
        max_length=200,
        description="Accepted when it names the key's own tenant (org_id) or project "
        "(project_id), as /v1/ping/ reports them; choose a project with X-Project.",
    ),
]
Count = Annotated[StrictInt, Field(ge=1, le=1000), BeforeValidator(json_integer)]
Unix = Annotated[StrictInt, Field(ge=0, le=32_503_680_000), BeforeValidator(json_integer)]
Score = Annotated[float, Field(ge=0, le=1_000_000), BeforeValidator(not_text)]


class Mem0Message(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant", "system", "tool"]
    content: StrictStr = Field(min_length=1, max_length=100_000)
    name: StrictStr | None = Field(
        default=None, min_length=1, max_length=100, pattern=r"^[^\x00-\x1f]+$"
    )


class _Common(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user_id: Entity = None
    agent_id: Entity = None
    app_id: Entity = None
    run_id: Entity = None
    org_id: Tenancy = None
    project_id: Tenancy = None
    version: StrictStr | None = Field(default=None, max_length=16, description="Ignored.")
    output_format: StrictStr | None = Field(
        default=None, max_length=16, description="Only v1.1 (the default) is answered."
    )
    enable_graph: StrictBool | None = Field(default=None, description="Only false.")


class AddIn(_Common):
    """mem0's add: messages (a plain string is sent by the client as one
    user message) and who they belong to."""

    messages: list[Mem0Message] = Field(min_length=1, max_length=100)
    metadata: Metadata = None
    filters: dict[str, StrictStr] | None = Field(
        default=None, description="Owner ids (user_id, agent_id, app_id, run_id), as v3 sends them."
    )
    infer: StrictBool | None = Field(
        default=None,
        description="true (default): keepmem's memory formation reads the messages (queued); "
        "false: each message is stored as a memory, verbatim.",
    )
    async_mode: StrictBool | None = Field(default=None, description="Only true with infer.")
    timestamp: Unix | None = Field(default=None, description="When it was said (Unix seconds).")
    custom_categories: Unsupported = None
    custom_instructions: Unsupported = None
    agent_custom_instructions: Unsupported = None
    expiration_date: Unsupported = None
    structured_data_schema: Unsupported = None
    includes: Unsupported = None
    excludes: Unsupported = None
    immutable: Unsupported = None


class SearchIn(_Common):
    query: StrictStr = Field(min_length=1, max_length=2000)
    filters: Filters = None
    metadata: dict[str, Any] | None = Field(
        default=None, description="Top-level metadata the memories must hold (equality)."
    )
    top_k: Count | None = Field(default=None, description="Default 10.")
    threshold: Score | None = Field(default=None, description="Minimum score (keepmem's).")
    rerank: StrictBool | None = Field(default=None, description="Accepted; keepmem ranks.")
    keyword_search: StrictBool | None = Field(default=None, description="true: full text only.")
    fields: list[StrictStr] | None = Field(
        default=None, max_length=20, description="Only these fields of each result."
    )
    latest_only: StrictBool | None = Field(
        default=None, description="false: superseded memories too (default true)."
    )
    show_expired: StrictBool | None = Field(default=None, description="Accepted (no expiry).")
    categories: Unsupported = None
    reference_date: Unsupported = None


class GetAllIn(_Common):
    filters: Filters = None
    start_date: StrictStr | None = Field(default=None, max_length=64, description="created_at >=")
    end_date: StrictStr | None = Field(default=None, max_length=64, description="created_at <=")
    latest_only: StrictBool | None = Field(
        default=None, description="false: superseded memories too (default true)."
    )
    show_expired: StrictBool | None = Field(default=None, description="Accepted (no expiry).")
    categories: Unsupported = None


class UpdateIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: StrictStr | None = Field(default=None, min_length=1, max_length=MAX_TEXT)
    metadata: Metadata = None
    timestamp: Unsupported = None
    expiration_date: Unsupported = None


class BatchUpdateItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    memory_id: StrictStr = Field(min_length=1, max_length=300)
    text: StrictStr | None = Field(default=None, min_length=1, max_length=MAX_TEXT)
    metadata: Metadata = None


class BatchDeleteItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    memory_id: StrictStr = Field(min_length=1, max_length=300)


class BatchUpdateIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    memories: list[BatchUpdateItem] = Field(min_length=1, max_length=MAX_BATCH)


class BatchDeleteIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    memories: list[BatchDeleteItem] = Field(min_length=1, max_length=MAX_BATCH)


# -- answers -------------------------------------------------------------------------


class Mem0Memory(BaseModel):
    id: str = Field(description="keepmem's memory id (mem/...): percent-encode it in paths.")
    memory: str
    user_id: str | None = None
    agent_id: str | None = None
    app_id: str | None = None
    run_id: str | None = None
    metadata: dict[str, Any] | None = None
    categories: list[str] = Field(default_factory=list, description="Always empty.")
    created_at: str
    updated_at: str
    score: float | None = Field(default=None, description="Search only: keepmem's score.")


class AddEvent(BaseModel):
    id: str
    event: Literal["ADD", "UPDATE", "NONE"]
    memory: str
    data: dict[str, str]


class AddOut(BaseModel):
    results: list[AddEvent] = Field(description="infer=false: each message's memory.")
    status: Literal["SUCCEEDED", "PENDING"]
    message: str
    event_id: str | None = Field(default=None, description="Never set: keepmem has no events API.")
    thread_id: str | None = Field(default=None, description="infer: the keepmem thread.")


class SearchOut(BaseModel):
    results: list[dict[str, Any]]


class PageOut(BaseModel):
    count: int
    next: str | None
    previous: str | None
    results: list[Mem0Memory]


class HistoryOut(BaseModel):
    id: str
    memory_id: str
    old_memory: str | None
    new_memory: str | None
    event: Literal["ADD", "UPDATE"]
    user_id: str | None = None
    input: list[dict[str, str]] = Field(default_factory=list)
    metadata: dict[str, Any] | None = None
    created_at: str
    updated_at: str


class Mem0Entity(BaseModel):
    id: str
    name: str
    type: Literal["user", "agent", "app", "run"]
    total_memories: int
    created_at: str
    updated_at: str
    owner: str | None = None
    organization: str | None = None
    metadata: dict[str, Any] | None = None


class Mem0EntityList(BaseModel):
    count: int
    results: list[Mem0Entity]


class Mem0MessageOut(BaseModel):
    message: str


class PingOut(BaseModel):
    status: str
    message: str
    org_id: str = Field(description="The key's tenant id.")
    project_id: str = Field(description="The project's slug (X-Project, else the default).")
    user_email: str | None = None
