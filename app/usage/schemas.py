"""Wire schemas of usage and quotas (``/v1/usage`` and the operator API)."""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator

from app.wire import not_text


class Quotas(BaseModel):
    notes: int | None = Field(default=None, ge=0, le=10**15, description="None: unlimited.")
    bytes: int | None = Field(default=None, ge=0, le=10**15)
    requests_per_day: int | None = Field(default=None, ge=0, le=10**15)
    jobs_per_day: int | None = Field(default=None, ge=0, le=10**15)

    _whole = field_validator("*", mode="before")(not_text)


class Usage(BaseModel):
    notes: int = Field(description="Notes stored (every project).")
    bytes: int = Field(description="Bytes stored: summaries, tags and held content.")
    requests_today: int | None = Field(description="API requests since 00:00 UTC.")
    jobs_today: int = Field(description="Background jobs queued since 00:00 UTC.")
    quotas: Quotas
