"""Wire schemas of the project settings API (``/v1/settings``).

The sessions and memories parts are those domains' own schemas, so a value
their routes refuse is refused here the same way."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool

from app.kit import origins
from app.memories.schemas import MemorySettingsIn
from app.sessions.schemas import ProjectSessionSettings
from app.wire import not_text

# A number of days, as JSON has it: 7 or 7.5, never "7" or true.
HalfLife = Annotated[float, Field(ge=0, le=1_000_000), BeforeValidator(not_text)]


class SettingsChange(BaseModel):
    """The settings to change; a field left out keeps its value, null puts
    the server's default back."""

    model_config = ConfigDict(extra="forbid")

    sanitize: StrictBool | None = Field(
        default=None,
        description="Remove secrets and <private> spans before anything is stored (default true).",
    )
    decay_half_life_days: HalfLife | None = Field(
        default=None,
        description="Half-life of find's recency bonus in days; 0 turns it off (default 30).",
    )
    auto_tag: StrictBool | None = Field(
        default=None,
        description="Tag new notes with a model from the project's .prompt/tag/* and .tag/* "
        "docs, when the server has one configured (default false).",
    )
    keep_text: StrictBool | None = Field(
        default=None,
        description="Keep each note's normalised text (compressed, counted in stored bytes, "
        "erased with the note) so that citations can quote and verify it and long notes "
        "can be re-cut into passages (default false: keep's default, no content kept).",
    )
    cors_origins: (
        Annotated[
            list[Annotated[str, Field(max_length=300, pattern=origins.ORIGIN_PATTERN)]],
            Field(max_length=origins.MAX_ORIGINS),
        ]
        | None
    ) = Field(
        default=None,
        description="Origins (scheme://host[:port], or * for any) whose web pages may call "
        "the API from a browser for this project (CORS); credentials such as cookies are "
        "never allowed, the key goes in the Authorization header (default: none).",
    )
    sessions: ProjectSessionSettings | None = Field(
        default=None, description="Coding-agent sessions, as PUT /v1/sessions/settings takes them."
    )
    memories: MemorySettingsIn | None = Field(
        default=None, description="Memory extraction, as PATCH /v1/memories/settings takes it."
    )


class MemoryBudget(BaseModel):
    llm_tokens_per_day: int | None = Field(
        description="The project's extraction budget (tokens per UTC day); null: the server's."
    )


class ProjectSettings(BaseModel):
    """Every setting of the project, the server's defaults filled in."""

    project: str = Field(description="The project's slug.")
    sanitize: bool
    decay_half_life_days: float
    auto_tag: bool
    keep_text: bool
    cors_origins: list[str]
    sessions: ProjectSessionSettings
    memories: MemoryBudget
