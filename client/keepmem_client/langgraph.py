"""A LangGraph ``BaseStore`` on keepmem (extra ``[langgraph]``): a graph's
long-term memory kept as keepmem notes, searchable by meaning.

    from keepmem_client import Keepmem, AsyncKeepmem
    from keepmem_client.langgraph import KeepmemStore

    store = KeepmemStore(Keepmem(), AsyncKeepmem())
    graph = builder.compile(store=store)

An item ``(namespace, key)`` is the note ``lg/<namespace...>/<key>`` (each part
percent-encoded), its value the note's summary as JSON, its namespace also
a tag (``lg_namespace``). ``search`` with a query is keepmem's hybrid find
within the namespace prefix; without one it lists the prefix, newest first.
``filter`` compares top-level value fields. Values are JSON objects of at
most 10,000 characters (keepmem's summary limit).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, unquote

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from keepmem_client._client import AsyncKeepmem, Keepmem
from keepmem_client._errors import NotFoundError
from keepmem_client._models import Note

ROOT = "lg/"
NAMESPACE_TAG = "lg_namespace"


def note_id(namespace: tuple[str, ...], key: str) -> str:
    return ROOT + "/".join(quote(part, safe="") for part in (*namespace, key))


def _prefix(namespace: tuple[str, ...]) -> str:
    return ROOT + "".join(quote(part, safe="") + "/" for part in namespace)


def _split(note: str) -> tuple[tuple[str, ...], str]:
    parts = [unquote(p) for p in note[len(ROOT) :].split("/")]
    return tuple(parts[:-1]), parts[-1]


def _when(value: str | None) -> datetime:
    if not value:
        return datetime.now(UTC)
    return datetime.fromisoformat(value).replace(tzinfo=UTC)


def _item(note: Note, score: float | None = None) -> SearchItem:
    namespace, key = _split(note.id)
    try:
        value = json.loads(note.summary)
    except ValueError:
        value = {"text": note.summary}
    return SearchItem(
        namespace=namespace,
        key=key,
        value=value if isinstance(value, dict) else {"value": value},
        created_at=_when(note.created_at),
        updated_at=_when(note.updated_at),
        score=score,
    )


def _matches(item: Item, filters: dict[str, Any] | None) -> bool:
    return all(item.value.get(k) == v for k, v in (filters or {}).items())


def _namespace_ok(namespace: tuple[str, ...], op: ListNamespacesOp) -> bool:
    for condition in op.match_conditions or ():
        path = tuple(condition.path)
        part = (
            namespace[: len(path)] if condition.match_type == "prefix" else namespace[-len(path) :]
        )
        if len(namespace) < len(path) or any(
            p != "*" and p != n for p, n in zip(path, part, strict=True)
        ):
            return False
    return True


class KeepmemStore(BaseStore):
    """LangGraph's store interface over keepmem (sync and async)."""

    def __init__(self, client: Keepmem | None = None, aclient: AsyncKeepmem | None = None) -> None:
        self.client = client
        self.aclient = aclient

    # -- sync ------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        if self.client is None:
            raise RuntimeError("KeepmemStore needs a Keepmem client for sync use")
        return [self._one(op) for op in ops]

    def _one(self, op: Op) -> Result:
        km = self.client
        assert km is not None
        if isinstance(op, GetOp):
            try:
                return _item(km.get(note_id(op.namespace, op.key)))
            except NotFoundError:
                return None
        if isinstance(op, PutOp):
            self._put(op)
            return None
        if isinstance(op, SearchOp):
            if op.query:
                scope = _prefix(op.namespace_prefix) + "*"
                found = km.find(op.query, scope=scope, limit=min(op.limit + op.offset, 100))
                items = [_item(n, n.score) for n in found.notes if n.id.startswith(ROOT)]
            else:
                items = [_item(n) for n in km.list(prefix=_prefix(op.namespace_prefix))]
            kept = [i for i in items if _matches(i, op.filter)]
            return kept[op.offset : op.offset + op.limit]
        if isinstance(op, ListNamespacesOp):
            seen = sorted({_split(n.id)[0] for n in km.list(prefix=ROOT)})
            return self._namespaces(seen, op)
        raise TypeError(f"unknown store operation {op!r}")

    def _put(self, op: PutOp) -> None:
        km = self.client
        assert km is not None
        target = note_id(op.namespace, op.key)
        if op.value is None:
            with contextlib.suppress(NotFoundError):
                km.delete(target)
            return
        text = json.dumps(op.value, sort_keys=True, default=str)
        tags = {NAMESPACE_TAG: "/".join(op.namespace)}
        km.put(text, id=target, summary=text, tags=tags)

    @staticmethod
    def _namespaces(seen: list[tuple[str, ...]], op: ListNamespacesOp) -> list[tuple[str, ...]]:
        found = [ns for ns in seen if _namespace_ok(ns, op)]
        if op.max_depth is not None:
            found = sorted({ns[: op.max_depth] for ns in found})
        return found[op.offset : op.offset + op.limit]

    # -- async -----------------------------------------------------------------------

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        if self.aclient is None:
            raise RuntimeError("KeepmemStore needs an AsyncKeepmem client for async use")
        return [await self._aone(op) for op in ops]

    async def _aone(self, op: Op) -> Result:
        km = self.aclient
        assert km is not None
        if isinstance(op, GetOp):
            try:
                return _item(await km.get(note_id(op.namespace, op.key)))
            except NotFoundError:
                return None
        if isinstance(op, PutOp):
            target = note_id(op.namespace, op.key)
            if op.value is None:
                with contextlib.suppress(NotFoundError):
                    await km.delete(target)
                return None
            text = json.dumps(op.value, sort_keys=True, default=str)
            await km.put(
                text, id=target, summary=text, tags={NAMESPACE_TAG: "/".join(op.namespace)}
            )
            return None
        if isinstance(op, SearchOp):
            if op.query:
                scope = _prefix(op.namespace_prefix) + "*"
                found = await km.find(op.query, scope=scope, limit=min(op.limit + op.offset, 100))
                items = [_item(n, n.score) for n in found.notes if n.id.startswith(ROOT)]
            else:
                items = [_item(n) async for n in km.list(prefix=_prefix(op.namespace_prefix))]
            kept = [i for i in items if _matches(i, op.filter)]
            return kept[op.offset : op.offset + op.limit]
        if isinstance(op, ListNamespacesOp):
            seen = sorted({_split(n.id)[0] async for n in km.list(prefix=ROOT)})
            return self._namespaces(seen, op)
        raise TypeError(f"unknown store operation {op!r}")
