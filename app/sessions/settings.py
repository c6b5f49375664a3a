"""A project's session settings: the ``sessions`` key of its settings
document, with the defaults a project that never set them gets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.sessions.cleaning import DEFAULT_EXCLUDES
from app.sessions.schemas import ProjectSessionSettings
from app.tenancy import Scope
from app.tenants import service as tenants

KEY = "sessions"
RESUME_CHARS = 6000  # well under the 10,000 characters a host cuts to a preview


@dataclass(frozen=True, slots=True)
class SessionSettings:
    capture: bool = True
    inject: bool = True
    excludes: tuple[str, ...] = DEFAULT_EXCLUDES
    resume_chars: int = RESUME_CHARS
    llm_tokens_per_day: int | None = None  # None: the server's default budget

    def as_dict(self) -> dict[str, Any]:
        return {
            "capture": self.capture,
            "inject": self.inject,
            "excludes": list(self.excludes),
            "resume_chars": self.resume_chars,
            "llm_tokens_per_day": self.llm_tokens_per_day,
        }


def parse(raw: Any) -> SessionSettings:
    if not isinstance(raw, dict):
        return SessionSettings()
    base = SessionSettings()
    return SessionSettings(
        capture=raw.get("capture", base.capture) is not False,
        inject=raw.get("inject", base.inject) is not False,
        excludes=tuple(raw["excludes"]) if isinstance(raw.get("excludes"), list) else base.excludes,
        resume_chars=int(raw.get("resume_chars") or base.resume_chars),
        llm_tokens_per_day=raw.get("llm_tokens_per_day"),
    )


async def settings_of(session: AsyncSession, scope: Scope) -> SessionSettings:
    return parse((await tenants.project_settings(session, scope)).get(KEY))


async def update(
    session: AsyncSession, scope: Scope, *, changes: ProjectSessionSettings
) -> SessionSettings:
    """Change the fields given; the others keep their values."""
    current = (await tenants.project_settings(session, scope)).get(KEY)
    merged = {**(current if isinstance(current, dict) else {})}
    merged.update(changes.model_dump(exclude_unset=True))
    await tenants.set_project_setting(session, scope, key=KEY, value=merged)
    return parse(merged)
