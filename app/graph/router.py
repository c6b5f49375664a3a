"""Graph routes: a note's entities, an entity's notes, walks, export and statistics."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Query, Response

from app.deps import NoteIdDep, ReadScope, SessionDep
from app.graph import service
from app.graph.export import CSV_MEDIA_TYPE, GRAPHML_MEDIA_TYPE
from app.graph.schemas import EntityList, EntityNotes, GraphStats, NoteGraph, Walk
from app.wire import api_router

router = api_router(prefix="/v1", tags=["graph"])


@router.get(
    "/notes/{note_id}/entities", response_model=NoteGraph, summary="A note's entities and relations"
)
async def note_entities(note_id: NoteIdDep, scope: ReadScope, session: SessionDep) -> NoteGraph:
    """The people, organisations, places … the note mentions (with character
    spans) and the relations between them it states (graph extraction)."""
    return NoteGraph.model_validate(await service.note_graph(session, scope, raw_id=note_id))


@router.get("/entities", response_model=EntityList, summary="List entities")
async def list_entities(
    scope: ReadScope,
    session: SessionDep,
    name: Annotated[str | None, Query(description="Name prefix, any case.")] = None,
    kind: Annotated[str | None, Query(description="person, org, place, group, …")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> EntityList:
    """Entities of the project, most-mentioned first."""
    found = await service.entities(session, scope, name=name, kind=kind, limit=limit)
    return EntityList.model_validate({"entities": found})


@router.get(
    "/entities/{key:path}/notes", response_model=EntityNotes, summary="Notes that mention an entity"
)
async def entity_notes(
    key: str,
    scope: ReadScope,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> EntityNotes:
    """The notes mentioning the entity (key as listed, e.g. `person:melanie`)."""
    return EntityNotes.model_validate(
        await service.entity_notes(session, scope, key=key, limit=limit)
    )


@router.get("/graph/walk", response_model=Walk, summary="Walk the graph from a note or an entity")
async def walk(
    scope: ReadScope,
    session: SessionDep,
    note: Annotated[str | None, Query(description="Start at this note.")] = None,
    entity: Annotated[str | None, Query(description="Or at this entity key.")] = None,
    depth: Annotated[int, Query(ge=1, le=5)] = 2,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> Walk:
    """Notes and entities within `depth` hops (edge tags, mentions, relations),
    nearest first, each with the link that reached it."""
    found = await service.walk_from(
        session, scope, note=note, entity=entity, depth=depth, limit=limit
    )
    return Walk.model_validate(found)


_EXPORTED = {
    200: {
        "description": "GraphML (`format=graphml`) or one CSV table (`format=csv`).",
        "content": {
            GRAPHML_MEDIA_TYPE: {"schema": {"type": "string"}},
            CSV_MEDIA_TYPE: {"schema": {"type": "string"}},
        },
        "headers": {
            "X-Truncated": {
                "description": "`true` when a table held more rows than one export carries.",
                "schema": {"type": "string", "enum": ["true", "false"]},
            }
        },
    }
}


@router.get(
    "/graph/export",
    response_class=Response,
    responses=_EXPORTED,  # type: ignore[arg-type]
    summary="Export the graph as GraphML or CSV",
)
async def export_graph(
    scope: ReadScope,
    session: SessionDep,
    format: Annotated[Literal["graphml", "csv"], Query(description="graphml or csv.")] = "graphml",
    table: Annotated[
        Literal["entities", "mentions", "relations", "edges", "topics"] | None,
        Query(description="The table a CSV export holds (csv only)."),
    ] = None,
) -> Response:
    """Entities, notes and topics (`topic` tag values) with their mentions,
    relations, note edges and topic membership, as one GraphML document, or
    one table as CSV. At most 100,000 rows per table; `X-Truncated: true`
    (and the GraphML graph attribute `truncated`) when a table was cut. A
    tag-scoped key exports only what it can see."""
    found = await service.export_graph(session, scope, format=format, table=table)
    return Response(
        content=found.body,
        media_type=found.media_type,
        headers={
            "X-Truncated": "true" if found.truncated else "false",
            "Content-Disposition": f'attachment; filename="{found.filename}"',
        },
    )


@router.get("/graph/stats", response_model=GraphStats, summary="Graph statistics")
async def graph_stats(scope: ReadScope, session: SessionDep) -> GraphStats:
    """Counts of entities (by kind), mentions, relations (top predicates),
    note edges, topics, notes with a mention, the most-mentioned entities
    and the connected components of the entity-relation graph."""
    return GraphStats.model_validate(await service.stats(session, scope))
