"""What the note tables' statements share: the scope filter, a row's
full-text vector, and a tag-scoped credential's stamp."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    ColumnElement,
    Text,
    and_,
    bindparam,
    func,
    literal_column,
)

from app.kit import tags as tagrules
from app.models import Note
from app.tenancy import Scope

FTS_CONFIG = "english"


def fts_of(text_value: str, tag_text: str) -> ColumnElement[Any]:
    return func.setweight(func.to_tsvector(FTS_CONFIG, tag_text), literal_column("'A'")).op("||")(
        func.to_tsvector(FTS_CONFIG, text_value)
    )


def fts_of_params() -> ColumnElement[Any]:
    """``fts_of`` of each row's own ``fts_text`` and ``tag_text`` parameters."""
    return func.setweight(
        func.to_tsvector(FTS_CONFIG, bindparam("tag_text", type_=Text)), literal_column("'A'")
    ).op("||")(func.to_tsvector(FTS_CONFIG, bindparam("fts_text", type_=Text)))


def in_scope(scope: Scope) -> ColumnElement[bool]:
    return and_(Note.tenant_id == scope.tenant_id, Note.project_id == scope.project_id)


def stamped(scope: Scope, values: dict[str, Any]) -> dict[str, Any]:
    """A tag-scoped credential's writes carry its scope's tags (row-level
    security refuses a note without them)."""
    if not scope.tag_terms or "tags" not in values:
        return values
    tags = tagrules.stamp(values["tags"], scope.tag_terms)
    return {**values, "tags": tags, "tag_index": tagrules.index_terms(tags)}
