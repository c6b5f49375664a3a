"""Wire schemas of keep's ``POST /v1/flow`` (KEEP_PROTOCOL §3.1)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from app.kit.storable import json_integer

# An integer as JSON Schema means it: 5 and 5.0, never "5".
JsonInt = Annotated[int, BeforeValidator(json_integer)]
TokenBudget = Annotated[int, Field(ge=0, le=1_000_000), BeforeValidator(json_integer)]


class FlowRequest(BaseModel):
    """The superset every keep client sends; unknown keys are ignored. Types
    are strict (a number sent as a string is refused, as the schema says)."""

    model_config = ConfigDict(extra="ignore", strict=True)

    state: str = Field(
        max_length=200,
        description="State name: a `.state/<name>` doc of the project (keep's named flows: put, "
        "get, find-deep, query-resolve, ...), `prompt`, or `__cursor__` to resume `cursor`.",
    )
    params: dict[str, Any] | None = Field(default=None, description="The state's parameters.")
    budget: JsonInt | str | None = Field(
        default=None, description="Tick budget (default 5); a stopped flow returns a cursor."
    )
    cursor_token: str | None = Field(
        default=None, max_length=65536, description="Resume cursor (from a stopped flow)."
    )
    cursor: str | None = Field(default=None, max_length=65536, description="Same (MCP's name).")
    state_doc_yaml: str | None = Field(
        default=None,
        max_length=65536,
        description="Inline state doc in keep's state-doc language, run for `state` in place "
        "of the project's `.state/<state>` (sub-flows still load from the project).",
    )
    writable: bool = Field(default=True, description="False: write states are refused.")
    token_budget: TokenBudget | None = Field(
        default=None, description="> 0: also render a text answer this long."
    )


FlowStatus = Literal["done", "error", "stopped", "async"]


class FlowResult(BaseModel):
    status: FlowStatus
    bindings: dict[str, Any] = Field(default_factory=dict)
    data: dict[str, Any] | None = None
    ticks: int = 0
    history: list[str] = Field(default_factory=list)
    cursor: str | None = None
    tried_queries: list[str] = Field(default_factory=list)
    rendered: str | None = Field(default=None, description="With token_budget > 0.")


class ImportRequest(BaseModel):
    """keep's import payload (``keep data import``): a keep-export document list."""

    format: str = Field(default="keep-export", max_length=40)
    version: int = Field(default=3, ge=1, le=100)
    mode: Literal["merge", "replace"] = Field(
        default="merge", description="merge: keep existing notes; replace: overwrite them."
    )
    documents: list[dict[str, Any]] = Field(max_length=100_000)


class ImportResult(BaseModel):
    imported: int
    versions: int
    parts: int
    skipped: int
    queued: int = Field(description="Notes queued for embedding and the rest of the pipeline.")


class ChangeEvent(BaseModel):
    """One write in keep's change feed (``keep-export-changes``)."""

    outbox_id: str = Field(description="The change's id: random, not a sequence number.")
    mutation: str = Field(description="doc_insert, doc_update, doc_delete, part_*, edge_* ...")
    entity_id: str
    collection: str = Field(description="The project.")
    payload_json: str
    created_at: str
    affected_note_ids: list[str]


class ChangesPage(BaseModel):
    """A page of ``GET /v1/export/changes`` (KEEP_PROTOCOL §3.5)."""

    format: Literal["keep-export-changes"]
    version: int
    cursor: str = Field(description="Pass as `cursor` for the next page (opaque).")
    head_cursor: str = Field(description='The newest change\'s cursor ("0" when none).')
    compacted: bool = Field(
        description="The cursor named no change of the project (its place is lost): no "
        "events, `cursor` is the head; rebuild from a full export and follow from there."
    )
    truncated: bool = Field(description="Always false: keepmem never drops feed rows.")
    events: list[ChangeEvent]
