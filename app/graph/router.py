"""Graph routes: a note's entities, an entity's notes, walks."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query

from app.deps import NoteIdDep, ReadScope, SessionDep
from app.graph import service
from app.graph.schemas import EntityList, EntityNotes, NoteGraph, Walk
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
