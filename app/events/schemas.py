"""Wire schemas of webhooks."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

from fastapi import Path
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.json_schema import SkipJsonSchema

from app.jobs.schemas import JobOut
from app.models import Webhook

WebhookId = Annotated[uuid.UUID, Path(description="A webhook's id.")]
Url = Annotated[
    str,
    Field(
        min_length=8,
        max_length=2000,
        pattern=r"^https?://",
        description="http(s) URL the events are POSTed to; it must resolve to a public "
        "address (none of IANA's special-purpose blocks) unless the operator allows the "
        "network (KEEPMEM_FETCH_ALLOW_NETWORKS).",
    ),
]
Kinds = Annotated[
    list[Annotated[str, Field(max_length=40)]],
    Field(
        max_length=20,
        description="Event kinds wanted (put, tag, delete, move, revert, summary, "
        "embedding, parts, failed; checkpoint, compaction, pattern of sessions; "
        "memory_added, memory_updated, memory_superseded of memories); empty: all.",
    ),
]
Tags = Annotated[
    dict[Annotated[str, Field(max_length=200)], Annotated[str, Field(max_length=500)]],
    Field(
        max_length=20,
        description='Only events of notes holding these tags (`""`: the key, any value).',
    ),
]


class WebhookIn(BaseModel):
    url: Url
    kinds: Kinds = []
    tags: Tags = {}
    description: str = Field(default="", max_length=500)
    secret: str | None = Field(
        default=None,
        min_length=16,
        max_length=200,
        description="Signing secret; one is made (and shown once) when left out.",
    )


def _no_null_defaults(schema: dict[str, Any]) -> None:
    for prop in schema.get("properties", {}).values():
        prop.pop("default", None)


class WebhookPatch(BaseModel):
    """The fields to change: those left out keep their value, and none
    takes null (a null is a 400 naming the field)."""

    # The fields are optional but not nullable: the document shows neither
    # a null type nor a null default.
    model_config = ConfigDict(json_schema_extra=_no_null_defaults)

    url: Url | SkipJsonSchema[None] = None
    kinds: Kinds | SkipJsonSchema[None] = None
    tags: Tags | SkipJsonSchema[None] = None
    description: Annotated[str, Field(max_length=500)] | SkipJsonSchema[None] = None
    active: bool | SkipJsonSchema[None] = Field(
        default=None,
        description="false pauses (changes wait, nothing is skipped); true resumes.",
    )

    @field_validator("active", mode="before")
    @classmethod
    def _strict_bool(cls, value: object) -> object:
        if value is not None and not isinstance(value, bool):
            raise ValueError("active must be true or false")
        return value


class WebhookOut(BaseModel):
    id: str
    url: str
    kinds: list[str]
    tags: dict[str, str]
    description: str
    active: bool
    cursor: str | None = Field(
        description="The id of the event deliveries continue after (null before the first)."
    )
    created_at: datetime
    created_by: str

    @classmethod
    def of(cls, hook: Webhook, *, cursor: str | None) -> WebhookOut:
        return cls(
            id=str(hook.id),
            url=hook.url,
            kinds=list(hook.kinds),
            tags=dict(hook.tags),
            description=hook.description,
            active=hook.active,
            cursor=cursor,
            created_at=hook.created_at,
            created_by=hook.created_by,
        )


class WebhookCreated(WebhookOut):
    secret: str = Field(description="The signing secret: shown this once.")


class WebhookList(BaseModel):
    webhooks: list[WebhookOut]


class DeliveryList(BaseModel):
    deliveries: list[JobOut] = Field(
        description="Newest first: each a job of kind `webhook` (retry a dead one with "
        "POST /v1/jobs/{id}/retry)."
    )
