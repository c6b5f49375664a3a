"""Wire schemas of the notes API (keep's daemon shapes, KEEP_PROTOCOL §3 and §7)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

from app.notes.tag_policy import Rule
from app.notes.views import ItemView
from app.wire import DateTimeText, not_text

TagInput = dict[str, Any]


class PutRequest(BaseModel):
    """A note to create or update. ``content`` is required for now; ``uri``
    names its source (and becomes the id when no id is given)."""

    model_config = ConfigDict(extra="ignore")

    content: str | None = Field(default=None, description="The note's text.")
    uri: str | None = Field(default=None, description="Source URI; the id when `id` is absent.")
    id: str | None = Field(
        default=None,
        description="Note id; inline text without one gets a content-addressed id `%` + 12 hex.",
    )
    summary: str | None = Field(
        default=None, description="Summary to store instead of one derived from the content."
    )
    tags: TagInput | None = Field(
        default=None,
        description="Tags to add: key -> value or "
        'list of values; `""` removes a key; `_` keys are ignored, except the tag rules '
        "(`_singular`, `_constrained`, `_value_regex`, `_inverse`, `_requires`) on a "
        "`.tag/<key>` note.",
    )
    created_at: str | None = Field(default=None, description="ISO-8601 creation time override.")
    force: StrictBool = Field(
        default=False, description="Re-run processing even if content is unchanged."
    )
    analyze: StrictBool = Field(default=False, description="Also split the note into parts.")
    expires_at: DateTimeText | None = Field(
        default=None, description="Delete the note after this time (ISO-8601 with a zone)."
    )
    ttl_seconds: int | None = Field(
        default=None,
        ge=0,
        le=10 * 366 * 86400,
        description="Delete the note this many seconds from now (0: never expire).",
    )

    _whole = field_validator("ttl_seconds", mode="before")(not_text)


class NoteOut(BaseModel):
    id: str
    summary: str
    tags: dict[str, Any]
    created_at: str
    updated_at: str
    changed: bool | None = Field(
        default=None, description="On put and tag: whether anything changed."
    )
    pending: list[str] = Field(
        default_factory=list, description="Background work still to run for this note."
    )

    @classmethod
    def of(cls, view: ItemView) -> NoteOut:
        return cls(
            id=view.id,
            summary=view.summary,
            tags=view.tags,
            created_at=view.created_at,
            updated_at=view.updated_at,
            changed=view.changed,
            pending=view.pending,
        )


class NoteList(BaseModel):
    notes: list[NoteOut]
    count: int
    next_cursor: str | None = Field(default=None, description="Pass as `cursor` for the next page.")


class TagRequest(BaseModel):
    set: TagInput | None = Field(default=None, description='Values to add; `""` removes the key.')
    remove: list[str] | None = Field(default=None, description="Keys to remove.")
    remove_values: TagInput | None = Field(default=None, description="Values to remove per key.")


class DeleteOut(BaseModel):
    deleted: str | bool
    reverted: bool = False
    note: NoteOut | None = None


class MoveRequest(BaseModel):
    name: str = Field(description="Target note id; created, or extended with history.")
    source: str = Field(default="now", description="Note to extract versions from.")
    tags: TagInput | None = Field(default=None, description="Only versions holding these tags.")
    only_current: StrictBool = Field(default=False, description="Only the current version.")


class VersionOut(BaseModel):
    offset: int = Field(description="1 = previous version; address it as `ID@V{1}`.")
    summary: str
    date: str
    tags: dict[str, Any]


class VersionList(BaseModel):
    versions: list[VersionOut]
    count: int = Field(description="Number of archived versions in all.")


class PartList(BaseModel):
    parts: list[NoteOut]
    count: int


class AnalyzeRequest(BaseModel):
    content: str | None = Field(
        default=None,
        description="The note's text; needed once keepmem no longer holds it.",
    )


class BatchRequest(BaseModel):
    notes: list[PutRequest] = Field(
        min_length=1,
        max_length=100,
        description="Up to 100 notes, stored in one transaction (one request against the "
        "rate limit).",
    )


class BatchResult(BaseModel):
    status: int = Field(description="200, or the status this note alone would have had.")
    note: NoteOut | None = None
    error: str | None = None
    code: str | None = None


class BatchOut(BaseModel):
    results: list[BatchResult] = Field(description="One per note, in the order sent.")
    stored: int
    failed: int


class TagRuleOut(BaseModel):
    """What a project's ``.tag/<key>`` note says about ``key``."""

    key: str
    singular: bool = Field(description="A new value replaces the old; one value per write.")
    constrained: bool = Field(description="Values must be among `values`.")
    values: list[str] = Field(
        description="A constrained tag's allowed values: its `.tag/<key>/<value>` notes."
    )
    value_regex: str | None = Field(description="Each value must match all of it.")
    inverse: str | None = Field(
        description="An edge tag: the name of the link seen from the target."
    )
    requires: str | None = Field(
        description="`constrained` and `value_regex` apply only to notes with this tag."
    )
    problem: str | None = Field(
        default=None,
        description="Why these rules cannot be applied (writes of the key are refused).",
    )

    @classmethod
    def of(cls, rule: Rule) -> TagRuleOut:
        return cls(
            key=rule.key,
            singular=rule.singular,
            constrained=rule.constrained,
            values=list(rule.values) if rule.constrained else [],
            value_regex=rule.value_regex,
            inverse=rule.inverse,
            requires=rule.requires,
            problem=rule.problem,
        )


class TagRuleList(BaseModel):
    rules: list[TagRuleOut] = Field(description="One per `.tag/<key>` note, by key.")
