"""keep's ``DocumentStoreProtocol`` on keepmem's notes (what a local keep's
Keeper calls, synchronously). Records come back as keep's own dataclasses.

Writes go through ``app.notes.records`` (the notes domain: feed, tag edges,
versions, keepmem's background work); reads through the notes repository.
keep's edge, backfill and outbox bookkeeping is in ``bookkeeping.py``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import NoteNotFound
from app.keepstore import repository as kept
from app.keepstore.bookkeeping import Bookkeeping
from app.keepstore.connection import DOC_COLLECTION, Connection
from app.kit import tags as tagrules
from app.kit.ids import glob_regex
from app.kit.timeutil import keep_ts, parse_timestamp
from app.models import Note, NoteVersion, Part
from app.notes import records
from app.notes import repository as repo
from app.notes.tag_policy import TagRuleBroken
from app.search import repository as search
from app.search.fulltext import repository as fulltext
from app.settings import Limits
from app.tenancy import Scope

MAX_LIST = 100_000  # "no limit" in keep's calls, bounded


def _keep() -> Any:
    from keep import document_store  # keep is the caller

    return document_store


def _tags(tags: dict[str, Any]) -> dict[str, Any]:
    """Tags as keep's own store writes them (duplicate values dropped, a
    one-value list as its value): keep's rule, applied with keep's code."""
    from keep.types import normalize_tag_map

    return dict(normalize_tag_map(tags))


def _record(collection: str, note: Note) -> Any:
    return _keep().DocumentRecord(
        id=note.id,
        collection=collection,
        summary=note.summary,
        tags=records.stored_tags(note.tags),
        created_at=keep_ts(note.created_at),
        updated_at=keep_ts(note.updated_at),
        content_hash=note.content_hash,
        content_hash_full=None,
        accessed_at=keep_ts(note.accessed_at),
    )


def _version(row: NoteVersion) -> Any:
    tags = dict(row.tags)
    tags.setdefault("_created", keep_ts(row.created_at))
    tags.setdefault("_updated", keep_ts(row.updated_at))
    return _keep().VersionInfo(
        version=row.version,
        summary=row.summary,
        tags=tags,
        created_at=keep_ts(row.updated_at),
        content_hash=row.content_hash,
    )


def _current_as_version(note: Note) -> Any:
    return _keep().VersionInfo(
        version=0,
        summary=note.summary,
        tags=records.stored_tags(note.tags),
        created_at=keep_ts(note.updated_at),
        content_hash=note.content_hash,
    )


def _part(row: Part) -> Any:
    return _keep().PartInfo(
        part_num=row.part_num,
        summary=row.summary,
        tags=dict(row.tags or {}),
        created_at=keep_ts(row.created_at),
    )


class KeepmemDocumentStore(Bookkeeping):
    def __init__(self, connection: Connection, *, graph_extraction: bool = True) -> None:
        self._c = connection
        self._graph = graph_extraction
        self._closed = False
        self._limits = Limits()

    # -- writes ------------------------------------------------------------------

    def upsert(
        self,
        collection: str,
        id: str,
        summary: str,
        tags: dict[str, Any],
        content_hash: str | None = None,
        content_hash_full: str | None = None,
        created_at: str | None = None,
        archive: bool = True,
    ) -> tuple[Any, bool]:
        when = parse_timestamp(created_at) if created_at else None

        async def work(s: AsyncSession, scope: Scope) -> tuple[Any, bool]:
            note, changed = await records.upsert(
                s,
                scope,
                note_id=id,
                summary=summary,
                tags=_tags(tags),
                content_hash=content_hash,
                created_at=when,
                graph_extraction=self._graph,
                archive=archive,
            )
            return _record(collection, note), changed

        try:
            return self._c.run(collection, work, write=True)
        except TagRuleBroken as exc:  # keep reports its own tag-rule refusals as ValueError
            raise ValueError(exc.message) from exc

    def update_summary(self, collection: str, id: str, summary: str) -> bool:
        return self._c.run(
            collection,
            lambda s, sc: records.set_summary(s, sc, note_id=id, summary=summary),
            write=True,
        )

    def update_tags(self, collection: str, id: str, tags: dict[str, Any]) -> bool:
        clean = _tags(tags)
        try:
            return self._c.run(
                collection,
                lambda s, sc: records.set_tags(s, sc, note_id=id, tags=clean),
                write=True,
            )
        except TagRuleBroken as exc:
            raise ValueError(exc.message) from exc

    def touch(self, collection: str, id: str) -> None:
        self.touch_many(collection, [id])

    def touch_many(self, collection: str, ids: list[str]) -> None:
        if ids:
            self._c.run(collection, lambda s, sc: records.touch(s, sc, note_ids=ids))

    def delete(self, collection: str, id: str, delete_versions: bool = True) -> bool:
        return self._c.run(collection, lambda s, sc: records.remove(s, sc, note_id=id), write=True)

    def restore_latest_version(self, collection: str, id: str) -> Any | None:
        async def work(s: AsyncSession, scope: Scope) -> Any | None:
            note = await records.restore_latest(s, scope, note_id=id)
            return None if note is None else _record(collection, note)

        return self._c.run(collection, work, write=True)

    # -- reads ------------------------------------------------------------------

    def get(self, collection: str, id: str) -> Any | None:
        async def work(s: AsyncSession, scope: Scope) -> Any | None:
            note = await repo.get(s, scope, id)
            return None if note is None else _record(collection, note)

        return self._c.run(collection, work)

    def get_many(self, collection: str, ids: list[str]) -> dict[str, Any]:
        async def work(s: AsyncSession, scope: Scope) -> dict[str, Any]:
            found = await repo.get_many(s, scope, list(dict.fromkeys(ids)))
            return {k: _record(collection, n) for k, n in found.items()}

        return self._c.run(collection, work) if ids else {}

    def exists(self, collection: str, id: str) -> bool:
        return self.get(collection, id) is not None

    def find_by_content_hash(
        self,
        collection: str,
        content_hash: str,
        *,
        content_hash_full: str = "",
        exclude_id: str = "",
    ) -> Any | None:
        async def work(s: AsyncSession, scope: Scope) -> Any | None:
            note = await kept.with_content_hash(s, scope, content_hash, exclude_id=exclude_id)
            return None if note is None else _record(collection, note)

        return self._c.run(collection, work)

    # -- versions ----------------------------------------------------------------

    def _versions(self, collection: str, id: str) -> list[NoteVersion]:
        async def work(s: AsyncSession, scope: Scope) -> list[NoteVersion]:
            return list(await repo.all_versions(s, scope, id))

        return self._c.run(collection, work)

    def list_versions(self, collection: str, id: str, limit: int = 10) -> list[Any]:
        async def work(s: AsyncSession, scope: Scope) -> list[Any]:
            rows = await repo.list_versions(s, scope, id, limit=self._limit(limit))
            return [_version(v) for v in rows]

        return self._c.run(collection, work)

    def list_versions_many(self, collection: str, ids: list[str]) -> dict[str, list[Any]]:
        async def work(s: AsyncSession, scope: Scope) -> dict[str, list[Any]]:
            found = await repo.versions_of_many(s, scope, list(dict.fromkeys(ids)))
            return {i: [_version(v) for v in reversed(rows)] for i, rows in found.items()}

        return self._c.run(collection, work) if ids else {}

    def get_version(self, collection: str, id: str, offset: int = 0) -> Any | None:
        """offset 1 = the previous version (0 is the current one: not a version)."""
        if offset < 1:
            return None

        async def work(s: AsyncSession, scope: Scope) -> Any | None:
            row = await repo.version_at(s, scope, id, newest_offset=offset)
            return None if row is None else _version(row)

        return self._c.run(collection, work)

    def get_version_by_number(self, collection: str, id: str, version: int) -> Any | None:
        found = [v for v in self._versions(collection, id) if v.version == version]
        return _version(found[0]) if found else None

    def get_latest_version_info_by_content_hash(
        self, collection: str, id: str, content_hash: str
    ) -> Any | None:
        for row in reversed(self._versions(collection, id)):
            if row.content_hash == content_hash:
                return _version(row)
        return None

    def list_versions_around(
        self, collection: str, id: str, version: int, radius: int = 2
    ) -> list[Any]:
        rows = self._versions(collection, id)
        return [_version(v) for v in rows if abs(v.version - version) <= radius]

    def get_version_nav(
        self, collection: str, id: str, current_version: int | None = None, limit: int = 3
    ) -> dict[str, list[Any]]:
        """Viewing the current note: up to ``limit`` previous versions; viewing
        version N: N-1 as prev, N+1 as next (an empty next: the current note)."""
        if current_version is None:
            return {"prev": self.list_versions(collection, id, limit=limit)}
        rows = {v.version: v for v in self._versions(collection, id)}
        out: dict[str, list[Any]] = {"prev": []}
        if current_version - 1 in rows:
            out["prev"] = [_version(rows[current_version - 1])]
        if current_version + 1 in rows:
            out["next"] = [_version(rows[current_version + 1])]
        elif self.exists(collection, id):
            out["next"] = []
        return out

    def version_count(self, collection: str, id: str) -> int:
        return self._c.run(collection, lambda s, sc: repo.count_versions(s, sc, id))

    def max_version(self, collection: str, id: str) -> int:
        return self._c.run(collection, lambda s, sc: repo.max_version(s, sc, id))

    def count_versions_from(self, collection: str, id: str, from_version: int) -> int:
        return sum(1 for v in self._versions(collection, id) if v.version >= from_version)

    # -- parts (made by keepmem's analysis; read here) -------------------------------

    def list_parts(self, collection: str, id: str) -> list[Any]:
        async def work(s: AsyncSession, scope: Scope) -> list[Any]:
            return [_part(p) for p in await repo.list_parts(s, scope, id)]

        return self._c.run(collection, work)

    def list_parts_many(self, collection: str, ids: list[str]) -> dict[str, list[Any]]:
        async def work(s: AsyncSession, scope: Scope) -> dict[str, list[Any]]:
            found = await repo.parts_of_many(s, scope, list(dict.fromkeys(ids)))
            return {i: [_part(p) for p in rows] for i, rows in found.items()}

        return self._c.run(collection, work) if ids else {}

    def get_part(self, collection: str, id: str, part_num: int) -> Any | None:
        found = [p for p in self.list_parts(collection, id) if p.part_num == part_num]
        return found[0] if found else None

    def part_count(self, collection: str, id: str) -> int:
        return len(self.list_parts(collection, id))

    def upsert_parts(self, collection: str, id: str, parts: list[Any]) -> int:
        rows = [(p.part_num, p.summary, _tags(p.tags)) for p in parts]
        return int(
            self._c.run(
                collection,
                lambda s, sc: records.put_parts(s, sc, note_id=id, parts=rows, replace=True),
                write=True,
            )
        )

    def upsert_single_part(self, collection: str, id: str, part: Any) -> None:
        rows = [(part.part_num, part.summary, _tags(part.tags))]
        self._c.run(
            collection,
            lambda s, sc: records.put_parts(s, sc, note_id=id, parts=rows, replace=False),
            write=True,
        )

    def update_part_tags(
        self, collection: str, id: str, part_num: int, tags: dict[str, Any]
    ) -> bool:
        clean = _tags(tags)
        return bool(
            self._c.run(
                collection,
                lambda s, sc: records.set_part_tags(
                    s, sc, note_id=id, part_num=part_num, tags=clean
                ),
                write=True,
            )
        )

    def max_part_num(self, collection: str, id: str) -> int:
        return max((p.part_num for p in self.list_parts(collection, id)), default=0)

    def delete_parts(self, collection: str, id: str) -> int:
        return int(
            self._c.run(collection, lambda s, sc: records.drop_parts(s, sc, note_id=id), write=True)
        )

    def list_part_doc_ids(self, collection: str, part_num: int) -> list[str]:
        async def work(s: AsyncSession, scope: Scope) -> list[str]:
            return await kept.notes_with_part(s, scope, part_num)

        return self._c.run(collection, work)

    # -- queries -----------------------------------------------------------------

    def _list(self, collection: str, q: repo.ListQuery) -> list[Any]:
        async def work(s: AsyncSession, scope: Scope) -> list[Any]:
            return [_record(collection, n) for n in await repo.list_notes(s, scope, q)]

        return self._c.run(collection, work)

    @staticmethod
    def _limit(limit: int | None) -> int:
        return MAX_LIST if not limit or limit <= 0 else min(limit, MAX_LIST)

    def list_ids(self, collection: str, limit: int | None = None) -> list[str]:
        q = repo.ListQuery(order_by="id", limit=self._limit(limit), include_hidden=True)
        return [r.id for r in self._list(collection, q)]

    def list_recent(
        self, collection: str, limit: int = 10, order_by: str = "updated", offset: int = 0
    ) -> list[Any]:
        order = order_by if order_by in ("updated", "accessed", "created", "id") else "updated"
        q = repo.ListQuery(
            order_by=order, limit=self._limit(limit), offset=offset, include_hidden=True
        )  # every note, as keep's store: keep hides system notes itself
        return self._list(collection, q)

    def list_recent_with_history(
        self, collection: str, limit: int = 10, order_by: str = "updated", offset: int = 0
    ) -> list[Any]:
        return self.list_recent(collection, limit, order_by, offset)

    def query_by_id_prefix(
        self, collection: str, prefix: str, limit: int = 0, offset: int = 0
    ) -> list[Any]:
        q = repo.ListQuery(
            prefix=prefix, order_by="id", limit=self._limit(limit), offset=offset,
            include_hidden=True,
        )  # fmt: skip
        return self._list(collection, q)

    def query_by_id_glob(
        self, collection: str, pattern: str, limit: int = 0, offset: int = 0
    ) -> list[Any]:
        q = repo.ListQuery(
            glob_regex=glob_regex(pattern), order_by="id", limit=self._limit(limit),
            offset=offset, include_hidden=True,
        )  # fmt: skip
        return self._list(collection, q)

    def _tagged(
        self,
        collection: str,
        key: str,
        value: str | None,
        *,
        limit: int,
        offset: int,
        since: str | None = None,
        until: str | None = None,
    ) -> list[Any]:
        async def work(s: AsyncSession, scope: Scope) -> list[Any]:
            found = await kept.with_tag(
                s,
                scope,
                key,
                value,
                since=parse_timestamp(since) if since else None,
                until=parse_timestamp(until) if until else None,
                limit=self._limit(limit),
                offset=offset,
            )
            return [_record(collection, n) for n in found]

        return self._c.run(collection, work)

    def query_by_tag_value(
        self, collection: str, key: str, value: str, *, limit: int = 100, offset: int = 0
    ) -> list[Any]:
        return self._tagged(collection, key, value, limit=limit, offset=offset)

    def query_by_tag_key(
        self,
        collection: str,
        key: str,
        limit: int = 100,
        since_date: str | None = None,
        until_date: str | None = None,
        offset: int = 0,
    ) -> list[Any]:
        return self._tagged(
            collection, key, None, limit=limit, offset=offset, since=since_date, until=until_date
        )

    def query_fts(
        self,
        collection: str,
        query: str,
        limit: int = 10,
        tags: dict[str, str] | None = None,
        part_tag_join_base_ids: list[str] | None = None,
    ) -> list[tuple[str, str, float]]:
        """Full text over summaries and parts (``id@p{N}``): (id, summary, score)."""

        async def work(s: AsyncSession, scope: Scope) -> list[tuple[str, str, float]]:
            terms = await fulltext.read_question(s, scope, query)
            if terms is None:
                return []
            filters = search.Filters(tag_terms=tagrules.filter_terms(tags) if tags else ())
            stage = await fulltext.full_text(
                s, scope, terms, kinds=["note", "part"], filters=filters, limit=limit
            )
            notes = await repo.get_many(s, scope, list({h.note_id for h in stage.hits}))
            out: list[tuple[str, str, float]] = []
            for hit in stage.hits:
                note = notes.get(hit.note_id)
                if note is None:
                    continue
                if hit.kind == "note":
                    out.append((note.id, note.summary, hit.score))
                else:
                    part = await repo.get_part(s, scope, hit.note_id, hit.ref)
                    if part is not None:
                        out.append((f"{note.id}@p{hit.ref}", part.summary, hit.score))
            return out

        return self._c.run(collection, work)

    def list_distinct_tag_keys(self, collection: str) -> list[str]:
        return self._c.run(collection, lambda s, sc: kept.distinct_tag_keys(s, sc))

    def list_distinct_tag_values(self, collection: str, key: str) -> list[str]:
        return self._c.run(collection, lambda s, sc: kept.distinct_tag_values(s, sc, key))

    def count(self, collection: str) -> int:
        return self._c.run(collection, lambda s, sc: repo.count(s, sc, include_hidden=True))

    def count_all(self) -> int:
        return self.count(DOC_COLLECTION)

    def count_versions(self, collection: str) -> int:
        return self._c.run(collection, lambda s, sc: kept.count_versions(s, sc))

    # -- move and import ----------------------------------------------------------------

    def extract_versions(
        self,
        collection: str,
        source_id: str,
        target_id: str,
        tag_filter: dict[str, str] | None = None,
        only_current: bool = False,
    ) -> tuple[list[Any], Any | None, int]:
        """Move versions of ``source_id`` into ``target_id`` (keepmem's move):
        (what moved, oldest first, the source's current one as version 0;
        the source afterwards or None; the target's first version number)."""

        async def work(s: AsyncSession, scope: Scope) -> tuple[list[Any], Any | None, int]:
            done = await records.extract(
                s, scope, source_id=source_id, target_id=target_id, tags=tag_filter,
                only_current=only_current,
            )  # fmt: skip
            moved = [
                _version(v) if isinstance(v, NoteVersion) else _current_as_version(v)
                for v in done.versions
            ]
            source = None if done.source is None else _record(collection, done.source)
            return moved, source, done.base_version

        try:
            return self._c.run(collection, work, write=True)
        except NoteNotFound as exc:
            raise ValueError(str(exc)) from exc

    def import_batch(self, collection: str, documents: list[dict[str, Any]]) -> dict[str, int]:
        limits = self._limits

        async def work(s: AsyncSession, scope: Scope) -> dict[str, int]:
            return await records.import_batch(s, scope, documents=documents, limits=limits)

        try:
            return self._c.run(collection, work, write=True)
        except TagRuleBroken as exc:
            raise ValueError(exc.message) from exc

    def copy_record(self, collection: str, from_id: str, to_id: str) -> Any | None:
        """A new note ``to_id`` with ``from_id``'s summary, tags and times."""

        async def work(s: AsyncSession, scope: Scope) -> Any | None:
            note = await records.copy(
                s, scope, from_id=from_id, to_id=to_id, graph_extraction=self._graph
            )
            return None if note is None else _record(collection, note)

        return self._c.run(collection, work, write=True)

    def delete_collection(self, collection: str) -> int:
        """Every note of the collection's project, with its history."""
        return int(self._c.run(collection, lambda s, sc: records.remove_all(s, sc), write=True))

    def delete_collection_all(self, collection: str) -> int:
        return self.delete_collection(collection)

    # -- collections -----------------------------------------------------------------

    def list_collections(self) -> list[str]:
        return [DOC_COLLECTION]

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._c.release()
