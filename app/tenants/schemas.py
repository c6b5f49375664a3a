"""Wire schemas of the projects API: the project list and a project's retention."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field, field_validator

from app.wire import not_text


class Retention(BaseModel):
    days: int | None = Field(
        default=None,
        ge=1,
        le=36600,
        description="Notes not updated for this many days are deleted (null: kept forever).",
    )

    _whole = field_validator("days", mode="before")(not_text)


class ProjectOut(BaseModel):
    slug: str
    created_at: datetime


class ProjectList(BaseModel):
    projects: list[ProjectOut]
