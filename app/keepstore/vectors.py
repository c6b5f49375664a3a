"""keep's ``VectorStoreProtocol`` on keepmem's embeddings table.

A vector a local keep computes is stored under the model identity
``keep:<keep's vector collection>`` (keep names that collection after its
embedding provider, model and dimension), beside the vectors keepmem's own
workers compute with keepmem's model. Each side searches only its own
model's vectors, so two spaces are never compared. Summaries and tags are
the notes': a vector row holds only the vector.

keep addresses a version's vector as ``ID@v{N}`` and a part's as ``ID@p{N}``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.keepstore import repository as kept
from app.keepstore.connection import DOC_COLLECTION, Connection
from app.notes import records
from app.notes import repository as notes
from app.notes.repository import vectors as embeddings
from app.tenancy import Scope

Key = tuple[str, str, int]
_SUFFIX = re.compile(r"^(?P<id>.+)@(?P<kind>[vp])(?P<n>\d+)$")
_KIND = {"v": "version", "p": "part"}
_SHORT = {"version": "v", "part": "p"}


def key_of(item_id: str) -> Key:
    found = _SUFFIX.match(item_id)
    if found is None:
        return (item_id, "note", 0)
    return (found["id"], _KIND[found["kind"]], int(found["n"]))


def id_of(key: Key) -> str:
    note_id, kind, ref = key
    return note_id if kind == "note" else f"{note_id}@{_SHORT[kind]}{ref}"


def _keep_store() -> Any:
    from keep import store  # keep is the caller

    return store


def model_of(collection: str) -> str:
    return f"keep:{collection}"


class KeepmemVectorStore:
    def __init__(self, connection: Connection, *, dimension: int | None = None) -> None:
        self._c = connection
        self._dimension = dimension
        self._closed = False

    def _run(self, work: Any, *, write: bool = False) -> Any:
        # vectors live beside the notes of keep's document collection
        return self._c.run(DOC_COLLECTION, work, write=write)

    @property
    def embedding_dimension(self) -> int | None:
        return self._dimension

    def reset_embedding_dimension(self, dimension: int) -> None:
        self._dimension = dimension

    # -- writes ----------------------------------------------------------------

    def _put(self, collection: str, key: Key, embedding: Sequence[float]) -> None:
        note_id, kind, ref = key

        async def work(s: AsyncSession, scope: Scope) -> None:
            await records.put_vector(
                s, scope, note_id=note_id, kind=kind, ref=ref, model=model_of(collection),
                vector=embedding,
            )  # fmt: skip

        self._run(work, write=True)

    def upsert(
        self, collection: str, id: str, embedding: list[float], summary: str, tags: dict[str, Any]
    ) -> None:
        self._put(collection, key_of(id), embedding)

    def upsert_version(
        self,
        collection: str,
        id: str,
        version: int,
        embedding: list[float],
        summary: str,
        tags: dict[str, Any],
    ) -> None:
        self._put(collection, (id, "version", version), embedding)

    def upsert_part(
        self,
        collection: str,
        id: str,
        part_num: int,
        embedding: list[float],
        summary: str,
        tags: dict[str, Any],
    ) -> None:
        self._put(collection, (id, "part", part_num), embedding)

    def upsert_batch(
        self,
        collection: str,
        ids: list[str],
        embeddings: list[list[float]],
        summaries: list[str],
        tags: list[dict[str, Any]],
    ) -> None:
        for item_id, vector in zip(ids, embeddings, strict=True):
            self._put(collection, key_of(item_id), vector)

    def _drop(self, collection: str, note_id: str, kind: str | None) -> int:
        model = model_of(collection)
        return int(
            self._run(
                lambda s, sc: records.drop_vectors(s, sc, note_id=note_id, model=model, kind=kind),
                write=True,
            )
        )

    def delete_parts(self, collection: str, id: str) -> int:
        return self._drop(collection, id, "part")

    def delete(self, collection: str, id: str, delete_versions: bool = True) -> bool:
        note_id, kind, _ = key_of(id)
        if kind != "note":
            return self._drop(collection, note_id, kind) > 0
        dropped = self._drop(collection, note_id, "note")
        if delete_versions:
            dropped += self._drop(collection, note_id, "version")
        return dropped > 0

    def delete_entries(self, collection: str, ids: list[str]) -> None:
        for item_id in ids:
            self.delete(collection, item_id, delete_versions=False)

    def update_summary(self, collection: str, id: str, summary: str) -> bool:
        return self.exists(collection, id)  # the summary is the note's

    def update_tags(self, collection: str, id: str, tags: dict[str, Any]) -> bool:
        return self.exists(collection, id)  # the tags are the note's

    # -- reads --------------------------------------------------------------------

    def _entries(self, collection: str, ids: Sequence[str]) -> list[dict[str, Any]]:
        keys = [key_of(i) for i in ids]
        model = model_of(collection)

        async def work(s: AsyncSession, scope: Scope) -> list[dict[str, Any]]:
            found = await kept.vectors_at(s, scope, keys, model)
            owners = await notes.get_many(s, scope, list({k[0] for k in found}))
            out = []
            for key in keys:
                note = owners.get(key[0])
                if key in found and note is not None:
                    summary = note.summary
                    if key[1] == "part":
                        part = await notes.get_part(s, scope, key[0], key[2])
                        summary = part.summary if part is not None else summary
                    tags = records.stored_tags(note.tags)
                    out.append(
                        {
                            "id": id_of(key),
                            "embedding": found[key],
                            "summary": summary,
                            "tags": tags,
                        }
                    )
            return out

        return list(self._run(work)) if keys else []

    def get_entries_full(self, collection: str, ids: list[str]) -> list[dict[str, Any]]:
        return self._entries(collection, ids)

    def get(self, collection: str, id: str) -> Any | None:
        found = self._entries(collection, [id])
        if not found:
            return None
        e = found[0]
        return _keep_store().StoreResult(id=e["id"], summary=e["summary"], tags=e["tags"])

    def get_embedding(self, collection: str, id: str) -> list[float] | None:
        found = self._entries(collection, [id])
        return found[0]["embedding"] if found else None

    def exists(self, collection: str, id: str) -> bool:
        return bool(self._entries(collection, [id]))

    def has_tag_markers(self, collection: str, id: str) -> bool:
        return True  # tags are read from the notes, never from vector metadata

    def migrated_to_cosine(self, *args: Any, **kwargs: Any) -> bool:
        return True  # keepmem's distances are cosine

    def query_embedding(
        self,
        collection: str,
        embedding: list[float],
        limit: int = 10,
        where: dict[str, Any] | None = None,
    ) -> list[Any]:
        """Nearest of keep's own vectors (cosine distance, 0 to 2, as Chroma's)."""
        model = model_of(collection)

        async def work(s: AsyncSession, scope: Scope) -> list[tuple[Key, float]]:
            near = await embeddings.nearest(
                s, scope, embedding, model=model, limit=limit, kinds=("note", "part")
            )
            return [((n.note_id, n.kind, n.ref), n.distance) for n in near]

        hits = self._run(work)
        entries = {e["id"]: e for e in self._entries(collection, [id_of(k) for k, _ in hits])}
        result = _keep_store().StoreResult
        out = []
        for key, distance in hits:
            e = entries.get(id_of(key))
            if e is not None:
                out.append(
                    result(id=e["id"], summary=e["summary"], tags=e["tags"], distance=distance)
                )
        return out

    def query_metadata(
        self, collection: str, where: dict[str, Any], limit: int = 100, offset: int = 0
    ) -> list[Any]:
        return []  # keep filters metadata in the document store

    # -- collections -----------------------------------------------------------------

    def _keys(self, collection: str) -> list[Key]:
        model = model_of(collection)
        return list(self._run(lambda s, sc: kept.keys_of_model(s, sc, model)))

    def list_ids(self, collection: str) -> list[str]:
        return [id_of(k) for k in self._keys(collection)]

    def find_missing_ids(self, collection: str, ids: list[str]) -> set[str]:
        have = set(self.list_ids(collection))
        return {i for i in ids if i not in have}

    def count(self, collection: str) -> int:
        return len(self._keys(collection))

    def list_collections(self) -> list[str]:
        return []

    def delete_collection(self, name: str) -> bool:
        return False

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._c.release()
