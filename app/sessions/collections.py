"""Collections: named, saved queries over a project's notes and session
observations (kimi-mneme's collections); run on demand, exported as
Markdown, JSON or plain text."""

from __future__ import annotations

import json
import re

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import BadRequest, NotFound
from app.kit.timeutil import parse_when
from app.notes import reading
from app.providers.embedding.base import Embedder, QueryCache
from app.search import service as search
from app.sessions import repository as repo
from app.sessions.intake import whole_project
from app.sessions.schemas import CollectionIn, CollectionItem, CollectionOut
from app.settings import Limits
from app.tenancy import Scope

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
FORMATS = ("markdown", "json", "text")


class CollectionNotFound(NotFound):
    code = "collection_not_found"


def _name(name: str) -> str:
    if not NAME.match(name):
        raise BadRequest(
            "a collection name is 1-100 letters, digits, '.', '_' or '-', starting with a "
            "letter or digit"
        )
    return name


async def save(
    session: AsyncSession, scope: Scope, *, name: str, data: CollectionIn
) -> CollectionOut:
    whole_project(scope)
    if data.since:
        parse_when(data.since)  # a 400 naming the value when it is not a time
    query = data.model_dump(exclude={"description"})
    await repo.put_collection(
        session, scope, name=_name(name), query=query, description=data.description
    )
    return CollectionOut(name=name, description=data.description, **query)


async def list_all(session: AsyncSession, scope: Scope) -> list[CollectionOut]:
    whole_project(scope)
    return [
        CollectionOut(name=r.name, description=r.description, **r.query)
        for r in await repo.collections(session, scope)
    ]


async def get(session: AsyncSession, scope: Scope, *, name: str) -> CollectionOut:
    whole_project(scope)
    rows = await repo.collections(session, scope, name=_name(name))
    if not rows:
        raise CollectionNotFound(f"collection not found: {name}")
    return CollectionOut(name=rows[0].name, description=rows[0].description, **rows[0].query)


async def delete(session: AsyncSession, scope: Scope, *, name: str) -> None:
    whole_project(scope)
    if not await repo.delete_collection(session, scope, name=_name(name)):
        raise CollectionNotFound(f"collection not found: {name}")


async def run(
    session: AsyncSession,
    scope: Scope,
    *,
    name: str,
    embedder: Embedder,
    cache: QueryCache,
    limits: Limits,
) -> list[CollectionItem]:
    """The collection's notes now: a find when it has words, else a list
    (newest first), with its tags and time as filters."""
    c = await get(session, scope, name=name)
    if c.query.strip():
        found = await search.find(
            session,
            scope,
            embedder=embedder,
            cache=cache,
            data=search.FindInput(query=c.query, tags=c.tags, since=c.since, limit=c.limit),
        )
        return [
            CollectionItem(
                id=v.id, summary=v.summary, tags=_user(v.tags), created_at=v.created_at, score=s
            )
            for v, s in found.items
        ]
    page = await reading.list_notes(
        session,
        scope,
        query=reading.ListInput(tags=c.tags, since=c.since, limit=c.limit, order_by="created"),
        limits=limits,
    )
    return [
        CollectionItem(id=v.id, summary=v.summary, tags=_user(v.tags), created_at=v.created_at)
        for v in page.items
    ]


def _user(tags: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in tags.items() if not k.startswith("_")}


def export(name: str, items: list[CollectionItem], fmt: str) -> tuple[str, str]:
    """(body, media type) of a collection's items in ``fmt``."""
    if fmt == "json":
        body = {"collection": name, "items": [i.model_dump() for i in items]}
        return json.dumps(body, ensure_ascii=False, indent=2), "application/json"
    if fmt == "markdown":
        lines = [f"# {name}", ""]
        for i in items:
            tags = ", ".join(f"{k}={v}" for k, v in i.tags.items())
            lines += [f"## {i.id}", "", i.summary, "", f"*{i.created_at}* {tags}".rstrip(), ""]
        return "\n".join(lines), "text/markdown; charset=utf-8"
    if fmt == "text":
        return "\n".join(f"{i.id}\t{i.created_at}\t{i.summary}" for i in items), (
            "text/plain; charset=utf-8"
        )
    raise BadRequest(f"format must be one of {', '.join(FORMATS)}")
