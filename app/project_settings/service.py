"""Reading and changing a project's settings as one document.

Each setting stays a key of the project's settings (``projects.settings``),
read where it is used: ``sanitize`` by ingest (``app.kit.redaction``),
``decay_half_life_days`` by find, ``auto_tag`` by the pipeline, ``sessions``
and ``memories`` by those domains. Here they are read with the server's
defaults filled in and changed together, in the request's transaction, with
one audit entry naming what changed (settings are configuration, never note
content)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.audit import repository as audit
from app.errors import OutsideScope
from app.kit import origins, redaction
from app.memories import settings as memory_settings
from app.notes import texts
from app.project_settings.schemas import SettingsChange
from app.search.service import DEFAULT_HALF_LIFE_DAYS
from app.sessions import settings as session_settings
from app.tenancy import Scope
from app.tenants import service as tenants

SANITIZE = "sanitize"
HALF_LIFE = "decay_half_life_days"
AUTO_TAG = "auto_tag"
KEEP_TEXT = texts.SETTING
CORS = origins.SETTING
# Settings held as one value each (sessions and memories merge their fields).
PLAIN = (SANITIZE, HALF_LIFE, AUTO_TAG, KEEP_TEXT, CORS)


def whole_project(scope: Scope) -> None:
    """Settings are the project's: a key with a tag scope sees only some of
    its notes, and so neither reads nor changes them."""
    if scope.tag_terms:
        raise OutsideScope("project settings need a key without a tag scope")


def _half_life(doc: dict[str, Any]) -> float:
    value = doc.get(HALF_LIFE, DEFAULT_HALF_LIFE_DAYS)
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return DEFAULT_HALF_LIFE_DAYS


def view(scope: Scope, doc: dict[str, Any]) -> dict[str, Any]:
    """Every setting as the code that uses it reads it."""
    return {
        "project": scope.project_slug,
        SANITIZE: redaction.enabled(doc),
        HALF_LIFE: _half_life(doc),
        AUTO_TAG: bool(doc.get(AUTO_TAG, False)),
        KEEP_TEXT: texts.enabled(doc),
        CORS: origins.listed(doc),
        "sessions": session_settings.parse(doc.get(session_settings.KEY)).as_dict(),
        "memories": {"llm_tokens_per_day": memory_settings.own(doc.get(memory_settings.KEY))},
    }


async def current(session: AsyncSession, scope: Scope) -> dict[str, Any]:
    """The project's settings, the server's defaults filled in."""
    whole_project(scope)
    return view(scope, await tenants.project_settings(session, scope))


async def change(session: AsyncSession, scope: Scope, *, changes: SettingsChange) -> dict[str, Any]:
    """Change the settings given (null: back to the server's default; the
    sessions and memories parts merge field by field, as their own routes
    do) and record what changed in the audit trail. Returns every setting."""
    whole_project(scope)
    given = changes.model_dump(exclude_unset=True)
    if given.get(CORS) is not None:
        given[CORS] = origins.origins(given[CORS])  # each checked, said once
    for key in PLAIN:
        if key not in given:
            continue
        if given[key] is None:
            await tenants.clear_project_setting(session, scope, key=key)
        else:
            await tenants.set_project_setting(session, scope, key=key, value=given[key])
    if KEEP_TEXT in given:
        texts.forget(scope)
    if "sessions" in given:
        if changes.sessions is None:
            await tenants.clear_project_setting(session, scope, key=session_settings.KEY)
        else:
            await session_settings.update(session, scope, changes=changes.sessions)
    if "memories" in given:
        if changes.memories is None:
            await tenants.clear_project_setting(session, scope, key=memory_settings.KEY)
        elif "llm_tokens_per_day" in changes.memories.model_fields_set:
            await memory_settings.update(
                session, scope, llm_tokens_per_day=changes.memories.llm_tokens_per_day
            )
    if given:
        await audit.record(
            session,
            scope,
            actor=scope.actor,
            action="project.settings",
            target=scope.project_slug,
            detail={"changed": given},
        )
    return await current(session, scope)
