"""Notes routes. Each parses, calls one service function and returns."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Query

from app.deps import LimitsDep, NoteIdDep, ReadScope, SessionDep, WriteScope
from app.errors import BadRequest
from app.kit.timeutil import parse_timestamp
from app.notes import service
from app.notes.schemas import (
    AnalyzeRequest,
    BatchOut,
    BatchRequest,
    BatchResult,
    DeleteOut,
    MoveRequest,
    NoteList,
    NoteOut,
    PartList,
    PutRequest,
    TagRequest,
    TagRuleList,
    TagRuleOut,
    VersionList,
    VersionOut,
)
from app.wire import MAX_OFFSET, api_router

router = api_router(prefix="/v1", tags=["notes"])


def _put_input(body: PutRequest) -> service.PutInput:
    return service.PutInput(
        content=body.content,
        uri=body.uri,
        id=body.id,
        summary=body.summary,
        tags=body.tags,
        created_at=body.created_at,
        force=body.force,
        analyze=body.analyze,
        expires_at=body.expires_at,
        ttl_seconds=body.ttl_seconds,
    )


@router.post("/notes", response_model=NoteOut, summary="Put a note")
async def put_note(
    body: PutRequest, scope: WriteScope, session: SessionDep, limits: LimitsDep
) -> NoteOut:
    """Create or update a note. A content change archives the previous version;
    the same content with new tags updates in place. Long content gets a
    placeholder summary until it is summarised in the background."""
    view = await service.put(session, scope, data=_put_input(body), limits=limits)
    return NoteOut.of(view)


@router.post("/notes/batch", response_model=BatchOut, summary="Put up to 100 notes")
async def put_notes(
    body: BatchRequest, scope: WriteScope, session: SessionDep, limits: LimitsDep
) -> BatchOut:
    """Several puts in one request and one transaction, for imports and agents
    that log many turns. Each note is stored or refused on its own: the
    results say which, in the order sent, with the error a single put would
    have given."""
    done = await service.put_many(
        session, scope, items=[_put_input(n) for n in body.notes], limits=limits
    )
    results = [
        BatchResult(
            status=item.status,
            note=NoteOut.of(item.view) if item.view else None,
            error=item.error,
            code=item.code,
        )
        for item in done
    ]
    stored = sum(1 for item in done if item.view is not None)
    return BatchOut(results=results, stored=stored, failed=len(done) - stored)


def tag_params(raw: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for item in raw:
        key, sep, value = item.partition("=")
        if not sep:
            raise BadRequest(f"tag filter {item!r} must be key=value (use tag_key for presence)")
        out.setdefault(key, []).append(value)
    return out


@router.get("/notes", response_model=NoteList, summary="List notes")
async def list_notes(
    scope: ReadScope,
    session: SessionDep,
    limits: LimitsDep,
    prefix: Annotated[
        str | None, Query(description="Id prefix, or a glob (`*`, `?`, `[]`).")
    ] = None,
    tag: Annotated[list[str], Query(description="`key=value` filter; repeat to AND.")] = [],  # noqa: B006
    tag_key: Annotated[list[str], Query(description="Tag key that must be present.")] = [],  # noqa: B006
    since: Annotated[str | None, Query(description="ISO-8601 duration (P3D) or date.")] = None,
    until: Annotated[str | None, Query(description="ISO-8601 duration or date.")] = None,
    order_by: Literal["updated", "accessed", "created", "id"] = "updated",
    limit: Annotated[int, Query(ge=1, le=1000)] = 20,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
    cursor: Annotated[str | None, Query(description="`next_cursor` of the previous page.")] = None,
    include_hidden: Annotated[
        bool, Query(description="Include system notes (ids starting with '.').")
    ] = False,
) -> NoteList:
    """List notes newest first (or by creation, access, id), filtered by id
    prefix or glob, tags and time; paginate with `offset` or `cursor`."""
    result = await service.list_notes(
        session,
        scope,
        query=service.ListInput(
            prefix=prefix,
            tags=tag_params(tag),
            tag_keys=tag_key,
            since=since,
            until=until,
            order_by=order_by,
            limit=limit,
            offset=offset,
            cursor=cursor,
            include_hidden=include_hidden,
        ),
        limits=limits,
    )
    return NoteList(
        notes=[NoteOut.of(v) for v in result.items],
        count=len(result.items),
        next_cursor=result.next_cursor,
    )


@router.get("/notes/{note_id}", response_model=NoteOut, summary="Get a note, version or part")
async def get_note(
    note_id: NoteIdDep,
    scope: ReadScope,
    session: SessionDep,
    as_of: Annotated[
        str | None,
        Query(max_length=64, description="ISO-8601: the version the note had then."),
    ] = None,
) -> NoteOut:
    """Get a note by id. A note with exactly this id wins; otherwise `ID@V{N}`
    is the N-th previous version (`@V{-1}` the oldest) and `ID@P{N}` part N.
    `now` and `now:<scope>` are created from the `.now` template on first read.
    With `as_of`, the note as it read then: the newest version written by that
    time (tags are today's: they change in place); 404 if it did not exist yet."""
    if as_of is not None:
        try:
            moment = parse_timestamp(as_of)
        except ValueError as exc:
            raise BadRequest(f"invalid as_of {as_of[:80]!r}: use ISO-8601 ({exc})") from exc
        return NoteOut.of(await service.get_as_of(session, scope, raw_id=note_id, as_of=moment))
    return NoteOut.of(await service.get(session, scope, raw_id=note_id))


@router.patch("/notes/{note_id}/tags", response_model=NoteOut, summary="Change a note's tags")
async def tag_note(
    note_id: NoteIdDep, body: TagRequest, scope: WriteScope, session: SessionDep
) -> NoteOut:
    """Add tag values (`""` removes a key), remove keys, or remove single
    values. Tags change in place; no version is archived."""
    view = await service.tag(
        session,
        scope,
        raw_id=note_id,
        set_tags=body.set,
        remove=body.remove,
        remove_values=body.remove_values,
    )
    return NoteOut.of(view)


@router.get("/tag-rules", response_model=TagRuleList, summary="List the project's tag rules")
async def tag_rules(scope: ReadScope, session: SessionDep) -> TagRuleList:
    """The rules the project's `.tag/<key>` notes declare, applied to every
    write of tags: `singular` (a new value replaces the old), `constrained`
    (only `values`), `value_regex`, `requires` (the rules hold only beside
    that tag) and `inverse` (an edge tag). A write that breaks one is a 400
    with code `tag_rule`."""
    found = await service.tag_rules(session, scope)
    return TagRuleList(rules=[TagRuleOut.of(rule) for rule in found])


@router.delete("/notes/{note_id}", response_model=DeleteOut, summary="Delete or revert a note")
async def delete_note(
    note_id: NoteIdDep,
    scope: WriteScope,
    session: SessionDep,
    delete_versions: Annotated[
        bool,
        Query(
            description="true: delete the note and its "
            "history; false: revert to the previous "
            "version (deletes it if there is none)."
        ),
    ] = True,
) -> DeleteOut:
    """Delete a note with its history, or revert it to its previous version."""
    result = await service.delete(session, scope, raw_id=note_id, delete_versions=delete_versions)
    return DeleteOut(
        deleted=result.deleted,
        reverted=result.reverted,
        note=NoteOut.of(result.item) if result.item else None,
    )


@router.get("/notes/{note_id}/versions", response_model=VersionList, summary="List versions")
async def list_versions(
    note_id: NoteIdDep,
    scope: ReadScope,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 10,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
) -> VersionList:
    """Archived versions, newest first. Offset 1 is the previous version."""
    entries, total = await service.versions(
        session, scope, raw_id=note_id, limit=limit, offset=offset
    )
    return VersionList(
        versions=[
            VersionOut(offset=e.offset, summary=e.summary, date=e.date, tags=e.tags)
            for e in entries
        ],
        count=total,
    )


@router.get("/notes/{note_id}/parts", response_model=PartList, summary="List parts")
async def list_parts(note_id: NoteIdDep, scope: ReadScope, session: SessionDep) -> PartList:
    """Parts made by analysis, in order; address one as `ID@P{N}`."""
    views = await service.parts(session, scope, raw_id=note_id)
    return PartList(parts=[NoteOut.of(v) for v in views], count=len(views))


@router.post("/move", response_model=NoteOut, summary="Move versions into a named note")
async def move_versions(body: MoveRequest, scope: WriteScope, session: SessionDep) -> NoteOut:
    """Extract versions of `source` (default `now`) into the note `name`:
    all of them, those holding `tags`, or only the current one."""
    view = await service.move(
        session,
        scope,
        name=body.name,
        source=body.source,
        tags=body.tags,
        only_current=body.only_current,
    )
    return NoteOut.of(view)


@router.post(
    "/notes/{note_id}/analyze",
    response_model=NoteOut,
    status_code=202,
    summary="Split a note into parts",
)
async def analyze_note(
    note_id: NoteIdDep,
    scope: WriteScope,
    session: SessionDep,
    limits: LimitsDep,
    body: AnalyzeRequest | None = None,
) -> NoteOut:
    """Queue analysis: the note's text is split into parts (`ID@P{N}`), each
    with its own summary and embedding. Send `content` once keepmem no longer
    holds the note's text (409 says so)."""
    view = await service.request_analysis(
        session, scope, raw_id=note_id, content=body.content if body else None, limits=limits
    )
    return NoteOut.of(view)
