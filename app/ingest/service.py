"""Ingest policy shared by every way content comes in (put, tag, analyze,
tasks, uploads and fetched documents)."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession

from app.kit import redaction
from app.tenancy import Scope
from app.tenants import repository as projects

T = TypeVar("T")


async def sanitizing(session: AsyncSession, scope: Scope) -> bool:
    """Whether the project sanitises at ingest (on unless its settings say
    ``sanitize: false``)."""
    settings = await projects.project_settings(session, scope)
    return redaction.enabled(settings)


def clean_fields(data: T, *, text: tuple[str, ...] = (), tags: tuple[str, ...] = ()) -> T:
    """A copy of a dataclass with its text fields and tag maps sanitised."""
    changes: dict[str, Any] = {}
    for name in text:
        value = getattr(data, name)
        if isinstance(value, str):
            changes[name] = redaction.clean(value)
    for name in tags:
        value = getattr(data, name)
        if value:
            changes[name] = redaction.clean_tags(value)
    if getattr(data, "uri", None):
        changes["uri"] = redaction.clean_uri(data.uri)  # type: ignore[attr-defined]
    return dataclasses.replace(data, **changes)  # type: ignore[type-var]
