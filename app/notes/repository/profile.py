"""A project's profile counted in the database (keep's ``stats`` action):
tag keys and values, busiest periods, versions, parts and edges.

Every count is an aggregate over the project's rows: a project of 100k notes
answers with a few hundred rows (one per tag key, busiest period or histogram
bucket), never with its notes. Only user notes are counted (ids not starting
with ``.``): the schema docs a project is seeded with are not its memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Integer,
    Select,
    String,
    and_,
    case,
    cast,
    func,
    literal,
    literal_column,
    select,
    true,
    union_all,
)
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute, aliased

from app.models import Edge, Note, NoteVersion, Part
from app.notes.repository._shared import in_scope
from app.notes.repository.edges import TAG
from app.tenancy import Scope

# keep's histograms put notes with more versions (parts) in the last bucket
VERSIONS_CAP = 100
PARTS_CAP = 50


def _user_note(note_id: ColumnElement[str] | InstrumentedAttribute[str]) -> ColumnElement[bool]:
    return ~note_id.startswith(".", autoescape=True)


def _edge_doc(
    key: Any, *, tenant_id: Any, project_id: Any
) -> tuple[Any, ColumnElement[bool], ColumnElement[bool], ColumnElement[str]]:
    """A tag key's ``.tag/<key>`` doc, its join condition, whether it makes
    the key an edge tag (a non-empty string ``_inverse``, as
    ``edges.inverse_verbs`` reads it) and the inverse verb. The id prefix lets
    the join read only the .tag docs, however the planner guesses the size."""
    doc = aliased(Note, name="tag_doc")
    on = and_(
        doc.tenant_id == tenant_id,
        doc.project_id == project_id,
        doc.id.startswith(".tag/", autoescape=True),
        doc.id == literal(".tag/") + key,
    )
    verb = doc.tags["_inverse"]
    is_edge = and_(func.jsonb_typeof(verb) == "string", verb.astext != "")
    return doc, on, is_edge, verb.astext


async def count_user_notes(session: AsyncSession, scope: Scope) -> int:
    stmt = select(func.count()).select_from(Note).where(in_scope(scope), _user_note(Note.id))
    return int(await session.scalar(stmt) or 0)


# -- tags -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TagKeyCounts:
    """One user tag key over the project's notes."""

    key: str
    notes: int  # notes holding the key
    distinct: int  # distinct values
    unique: int  # values held by exactly one note
    fan_out_sum: int  # values over every note holding the key (a list counts each)
    fan_out_max: int
    fan_in_max: int  # the most notes holding one value
    edge: bool  # its .tag doc names an _inverse
    top_values: list[str]  # the most held values, most first
    top_counts: list[int]  # and how many notes hold each


def _tag_key_statement(scope: Scope, top_k: int) -> Select[Any]:
    tag = func.jsonb_each(Note.tags).table_valued("key", "value").alias("tag")
    held = (
        select(tag.c.key, tag.c.value)
        .select_from(Note)
        .join(tag, true())
        .where(
            in_scope(scope),
            _user_note(Note.id),
            ~tag.c.key.startswith("_", autoescape=True),
        )
        .cte("held")
    )
    is_list = func.jsonb_typeof(held.c.value) == "array"
    # a scalar value is a list of one, so one expansion serves both
    as_list = case((is_list, held.c.value), else_=func.jsonb_build_array(held.c.value))
    length = case((is_list, func.jsonb_array_length(held.c.value)), else_=1)
    element = func.jsonb_array_elements_text(as_list).table_valued("value").alias("element")
    per_value = (
        select(held.c.key, element.c.value, func.count().label("n"))
        .select_from(held)
        .join(element, true())
        .group_by(held.c.key, element.c.value)
        .cte("per_value")
    )
    rank = func.row_number().over(
        partition_by=per_value.c.key, order_by=(per_value.c.n.desc(), per_value.c.value)
    )
    ranked = select(*per_value.c, rank.label("rank")).cte("ranked")
    top = ranked.c.rank <= top_k
    per_key_values = (
        select(
            ranked.c.key,
            func.count().label("distinct"),
            func.count().filter(ranked.c.n == 1).label("unique"),
            func.max(ranked.c.n).label("fan_in_max"),
            func.array_agg(aggregate_order_by(ranked.c.value, ranked.c.rank))
            .filter(top)
            .label("top_values"),
            func.array_agg(aggregate_order_by(ranked.c.n, ranked.c.rank))
            .filter(top)
            .label("top_counts"),
        )
        .group_by(ranked.c.key)
        .cte("per_key_values")
    )
    per_key = (
        select(
            held.c.key,
            func.count().label("notes"),
            func.sum(length).label("fan_out_sum"),
            func.max(length).label("fan_out_max"),
        )
        .group_by(held.c.key)
        .cte("per_key")
    )
    doc, on, is_edge, _ = _edge_doc(
        per_key.c.key, tenant_id=scope.tenant_id, project_id=scope.project_id
    )
    return (
        select(
            per_key.c.key,
            per_key.c.notes,
            per_key_values.c.distinct,
            per_key_values.c.unique,
            per_key.c.fan_out_sum,
            per_key.c.fan_out_max,
            per_key_values.c.fan_in_max,
            func.coalesce(is_edge, False).label("edge"),
            per_key_values.c.top_values,
            per_key_values.c.top_counts,
        )
        .select_from(per_key)
        .join(per_key_values, per_key_values.c.key == per_key.c.key)
        .outerjoin(doc, on)
        .order_by(per_key.c.notes.desc(), per_key.c.key)
    )


async def tag_keys(session: AsyncSession, scope: Scope, *, top_k: int) -> list[TagKeyCounts]:
    """Every user tag key the project's notes hold, most held first, each
    with its ``top_k`` most held values."""
    rows = await session.execute(_tag_key_statement(scope, top_k))
    return [TagKeyCounts(**r._mapping) for r in rows]


# -- dates ----------------------------------------------------------------------

DATE_COLUMNS = {
    "created": Note.created_at,
    "updated": Note.updated_at,
    "accessed": Note.accessed_at,
}
# a period's label is the start of its day label: 2024, 2024-05, 2024-05-17
GRAINS = {"annual": 4, "monthly": 7, "daily": 10}


async def busiest_periods(
    session: AsyncSession, scope: Scope, *, top_k: int
) -> list[tuple[str, str, str, int]]:
    """(date column, grain, period, notes): for each of ``DATE_COLUMNS`` and
    ``GRAINS``, the ``top_k`` periods holding the most notes (UTC days); the
    earliest and latest days come too, as the grains ``first`` and ``last``."""
    days = union_all(
        *(
            select(
                literal(name, String).label("column"),
                func.to_char(func.timezone("UTC", column), "YYYY-MM-DD").label("day"),
            ).where(in_scope(scope), _user_note(Note.id))
            for name, column in DATE_COLUMNS.items()
        )
    ).cte("days")
    daily = (
        select(days.c.column, days.c.day, func.count().label("n"))
        .group_by(days.c.column, days.c.day)
        .cte("daily")
    )

    def period(width: int) -> ColumnElement[str]:
        # the width inline: a parameter in the select and another in the
        # GROUP BY would be two expressions to Postgres
        return func.left(daily.c.day, literal_column(str(int(width))))

    periods = union_all(
        *(
            select(
                daily.c.column,
                literal(grain, String).label("grain"),
                period(width).label("label"),
                func.sum(daily.c.n).label("n"),
            ).group_by(daily.c.column, period(width))
            for grain, width in GRAINS.items()
        ),
        *(
            select(
                daily.c.column, literal(end, String), bound(daily.c.day), literal(0, Integer)
            ).group_by(daily.c.column)
            for end, bound in (("first", func.min), ("last", func.max))
        ),
    ).cte("periods")
    rank = func.row_number().over(
        partition_by=(periods.c.column, periods.c.grain),
        order_by=(periods.c.n.desc(), periods.c.label.desc()),
    )
    ranked = select(*periods.c, rank.label("rank")).subquery("ranked")
    rows = await session.execute(
        select(ranked.c.column, ranked.c.grain, ranked.c.label, ranked.c.n)
        .where(ranked.c.rank <= top_k)
        .order_by(ranked.c.column, ranked.c.grain, ranked.c.rank)
    )
    return [(r[0], r[1], r[2], int(r[3])) for r in rows]


# -- structure ------------------------------------------------------------------


def _histogram(
    kind: str, table: type[NoteVersion | Part], scope: Scope, cap: int
) -> Select[str, str, int]:
    """Notes by how many rows they have in a per-note table (capped)."""
    per_note = (
        select(func.least(func.count(), cap).label("bucket"))
        .where(
            table.tenant_id == scope.tenant_id,
            table.project_id == scope.project_id,
            _user_note(table.note_id),
        )
        .group_by(table.note_id)
        .subquery()
    )
    bucket = cast(per_note.c.bucket, String)
    return select(literal(kind, String), bucket, func.count()).group_by(per_note.c.bucket)


async def structure(session: AsyncSession, scope: Scope) -> list[tuple[str, str, int]]:
    """(kind, key, count) rows, in one statement: the ``versions`` and
    ``parts`` histograms (key: the bucket), notes by ``source``, tag edges by
    predicate (``forward``) and by inverse verb (``inverse``), and the
    distinct ends of edges (``edge_sources``, ``edge_targets``; key "")."""
    edges_scope = and_(
        Edge.tenant_id == scope.tenant_id, Edge.project_id == scope.project_id, Edge.origin == TAG
    )
    doc, on, is_edge, verb = _edge_doc(
        Edge.predicate, tenant_id=Edge.tenant_id, project_id=Edge.project_id
    )
    stmt = union_all(
        _histogram("versions", NoteVersion, scope, VERSIONS_CAP),
        _histogram("parts", Part, scope, PARTS_CAP),
        select(literal("source", String), Note.source, func.count())
        .where(in_scope(scope), _user_note(Note.id))
        .group_by(Note.source),
        select(literal("forward", String), Edge.predicate, func.count())
        .where(edges_scope)
        .group_by(Edge.predicate),
        select(literal("inverse", String), verb, func.count())
        .select_from(Edge)
        .join(doc, on)
        .where(edges_scope, is_edge)
        .group_by(verb),
        *(
            select(
                literal(kind, String), literal("", String), func.count(func.distinct(end))
            ).where(edges_scope)
            for kind, end in (("edge_sources", Edge.source_id), ("edge_targets", Edge.target_id))
        ),
    )
    return [(r[0], r[1], int(r[2])) for r in await session.execute(stmt)]
