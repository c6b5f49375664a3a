"""Wire schemas of usage and quotas (``/v1/usage`` and the operator API)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.wire import not_text


class Quotas(BaseModel):
    """A tenant's limits: a number is the limit (0 allows nothing), null is unlimited."""

    notes: int | None = Field(default=None, ge=0, le=10**15, description="Notes stored.")
    bytes: int | None = Field(default=None, ge=0, le=10**15, description="Bytes stored.")
    requests_per_day: int | None = Field(
        default=None, ge=0, le=10**15, description="API requests a day (UTC)."
    )
    jobs_per_day: int | None = Field(
        default=None, ge=0, le=10**15, description="Background jobs queued a day (UTC)."
    )

    _whole = field_validator("*", mode="before")(not_text)


class QuotaChanges(Quotas):
    """The quotas to change: each one given is set (a number is the limit, 0
    allowing nothing at all; null makes it unlimited); each one left out stays
    as it is. A name that is not a quota is refused (a typo must not pass as
    "nothing to change")."""

    model_config = ConfigDict(extra="forbid")

    def changes(self) -> dict[str, int | None]:
        return self.model_dump(include=self.model_fields_set)


class ModelSpend(BaseModel):
    """Calls to the server's model and the tokens they took, as the model's
    replies reported them."""

    calls: int = Field(description="Model calls made.")
    tokens_in: int = Field(description="Input (prompt) tokens.")
    tokens_out: int = Field(description="Output (completion) tokens.")


class Usage(BaseModel):
    notes: int = Field(description="Notes stored (every project).")
    bytes: int = Field(description="Bytes stored: summaries, tags and held content.")
    requests_today: int | None = Field(description="API requests since 00:00 UTC.")
    jobs_today: int = Field(description="Background jobs queued since 00:00 UTC.")
    model_tokens_today: ModelSpend = Field(
        description="Model spend on compressing coding-agent sessions since 00:00 UTC, "
        "every project (each project's own, with its budget: `GET /v1/sessions/spend`)."
    )
    memory_tokens_today: ModelSpend = Field(
        description="Model spend on memory extraction since 00:00 UTC, every project "
        "(each project's own, with its budget: `GET /v1/memories/spend`)."
    )
    quotas: Quotas
