"""Where a flow's state docs come from and how its actions run, for one
request, and the meta sections of a note (``.meta/*`` docs run as flows).

A state doc is the project's own ``.state/<name>`` note and its fragments
(``.state/<name>/*``, unless tagged ``active: "false"``), or keep's bundled
doc when the project has none (projects made before the docs were seeded
into them); an inline doc the caller sent wins for its own name.

Writes run in a savepoint each, so a refused write leaves nothing half
done, and need a writable flow and a write-scoped key.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from app.errors import AppError, MissingScope, NotFound
from app.flows import actions, runtime
from app.flows.runtime import ActionFailed, FlowFailed
from app.flows.statedoc import Fragment, StateDoc, StateDocError, merged, parse, parse_fragment
from app.flows.states import FlowContext
from app.notes import service as notes
from app.notes import system_docs
from app.tenancy import WRITE

log = logging.getLogger("keepmem.flows")

PREFIX = ".state/"
META = ".meta/"
MAX_META_DOCS = 50
# Actions one request may run (its flow, sub-flows and meta docs together):
# a doc is data a project writes, so what one call can cost is bounded.
MAX_ACTIONS = 200


class Spend:
    def __init__(self, limit: int = MAX_ACTIONS) -> None:
        self.left = limit

    def take(self) -> None:
        if self.left <= 0:
            raise FlowFailed(f"a request runs at most {MAX_ACTIONS} actions")
        self.left -= 1


@functools.lru_cache(maxsize=1024)
def _parse(name: str, text: str) -> StateDoc:
    return parse(name, text)


@functools.lru_cache(maxsize=1024)
def _fragment(name: str, text: str) -> Fragment:
    return parse_fragment(name, text)


def compose(name: str, base: str, children: list[tuple[str, str, dict[str, Any]]]) -> StateDoc:
    """A doc from its text and its fragments' (id, text, tags)."""
    try:
        doc = _parse(name, base)
    except StateDocError as exc:
        raise FlowFailed(f"state doc {PREFIX}{name} does not parse: {exc}") from exc
    fragments = []
    for child_id, text, tags in children:
        if str(tags.get("active", "")).lower() == "false" or not text.strip():
            continue
        try:
            fragments.append(_fragment(child_id.removeprefix(f"{PREFIX}{name}/"), text))
        except StateDocError as exc:
            raise FlowFailed(f"fragment {child_id} does not parse: {exc}") from exc
    return merged(doc, fragments)


def bundled(name: str) -> StateDoc | None:
    base = system_docs.doc(PREFIX + name)
    if base is None:
        return None
    under = PREFIX + name + "/"
    children = [(d.id, d.body, d.tags) for d in system_docs.bundled() if d.id.startswith(under)]
    return compose(name, base.body, children)


class KeepmemHost:
    def __init__(
        self,
        ctx: FlowContext,
        *,
        writable: bool,
        inline: dict[str, StateDoc] | None = None,
        spend: Spend | None = None,
    ) -> None:
        self.ctx = ctx
        self.writable = writable
        self.inline: dict[str, StateDoc | None] = dict(inline or {})
        self.spend = spend or Spend()

    async def load(self, name: str) -> StateDoc | None:
        """The doc, read once per request (a flow may come back to a state)."""
        if name not in self.inline:
            self.inline[name] = await self._read(name)
        return self.inline[name]

    async def _read(self, name: str) -> StateDoc | None:
        doc_id = PREFIX + name
        try:
            found = await notes.family(self.ctx.session, self.ctx.scope, note_id=doc_id)
        except AppError as exc:  # not a valid id: no such doc
            raise FlowFailed(f"state doc not found: {name} ({exc.message})") from exc
        base = next((v for v in found if v.id == doc_id), None)
        if base is None:
            return bundled(name)
        children = [(v.id, v.summary, v.tags) for v in found if v.id != doc_id]
        return compose(name, base.summary, children)

    def is_async(self, name: str) -> bool:
        return name in actions.ASYNC

    async def act(self, name: str, params: dict[str, Any]) -> dict[str, Any]:
        self.spend.take()
        if name == "resolve_meta":
            return await self._meta(params)
        action = actions.ACTIONS.get(name)
        if action is None:
            raise ActionFailed(f"unknown action: {name}")
        if name not in actions.WRITES:
            try:
                return await action(self.ctx, params)
            except AppError as exc:
                raise ActionFailed(exc.message, exc.code) from exc
        if not self.writable:
            raise ActionFailed(f"action {name!r} writes, and this flow is read-only")
        if WRITE not in self.ctx.scope.permissions:
            raise MissingScope(f"action {name!r} writes: this API key lacks the 'write' scope")
        try:
            async with self.ctx.session.begin_nested():
                return await action(self.ctx, params)
        except MissingScope:
            raise
        except AppError as exc:
            raise ActionFailed(exc.message, exc.code) from exc

    async def _meta(self, params: dict[str, Any]) -> dict[str, Any]:
        note_id = actions._id(params, "item_id", "id")
        limit = actions._int(params, "limit", 3, high=100)
        found = await meta_sections(self.ctx, note_id, limit, spend=self.spend)
        return {"sections": found, "count": sum(len(v) for v in found.values())}


async def meta_sections(
    ctx: FlowContext,
    note_id: str,
    limit: int,
    *,
    tags: dict[str, Any] | None = None,
    spend: Spend | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """The meta sections of a note's context: each ``.meta/<name>`` note of
    the project is a state doc (usually ``find`` rules with ``similar_to`` the
    note in view and tag filters), run for one tick with ``item_id``,
    ``limit`` and the note's own tags as params. Its section holds the notes
    its rules found (with their scores), in rule order, each once, the note
    in view left out;
    empty sections are left out. A meta note that does not parse as a state
    doc shows nothing (the log says why), unless keep ships a doc of that
    name (a project seeded before keepmem ran meta docs holds prose there)."""
    if limit <= 0:
        return {}
    if tags is None:  # the caller has not read the note (a flow's resolve_meta)
        try:
            viewed = await notes.get(ctx.session, ctx.scope, raw_id=note_id)
        except NotFound:
            return {}
        note_id, tags = viewed.id, viewed.tags
    listed = await notes.list_notes(
        ctx.session,
        ctx.scope,
        query=notes.ListInput(prefix=META, include_hidden=True, order_by="id", limit=MAX_META_DOCS),
        limits=ctx.limits,
    )
    params: dict[str, Any] = {k: v for k, v in tags.items() if not k.startswith("_")}
    params |= {"item_id": note_id, "limit": limit}
    out: dict[str, list[dict[str, Any]]] = {}
    spend = spend or Spend()
    for doc_note in listed.items:
        name = doc_note.id.removeprefix(META)
        try:
            doc = _parse(name, doc_note.summary)
        except StateDocError as exc:
            # keepmem seeded prose meta docs before it ran them: such a doc
            # is read as keep's doc of the same name
            shipped = system_docs.doc(doc_note.id)
            if shipped is None:
                log.info("meta doc %s is not a state doc: %s", doc_note.id, exc)
                continue
            doc = _parse(name, shipped.body)
        host = KeepmemHost(ctx, writable=False, inline={name: doc}, spend=spend)
        ran = await runtime.run(host, name, params, 1)
        found = _found(ran.bindings, exclude=note_id)
        if found:
            out[name] = found
    return out


def _found(bindings: dict[str, Any], *, exclude: str) -> list[dict[str, Any]]:
    """The results of a meta doc's rules, in rule order, each note once."""
    seen: set[str] = {exclude}
    out: list[dict[str, Any]] = []
    for binding in bindings.values():
        results = binding.get("results") if isinstance(binding, dict) else None
        for r in results if isinstance(results, list) else []:
            note_id = r.get("id") if isinstance(r, dict) else None
            if not note_id or note_id in seen:
                continue
            seen.add(note_id)
            out.append(
                {
                    "id": note_id,
                    "summary": str(r.get("summary", "")),
                    "tags": dict(r.get("tags") or {}),
                    "score": r.get("score"),
                }
            )
    return out
