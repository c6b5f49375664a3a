"""The MCP tools that search and walk what a project holds, added to
``keepmem-mcp`` and to keepmem's own ``/mcp`` by ``mcp_proxy.build``: find
(every parameter of ``POST /v1/search`` but ``explain``, a debugging aid),
entities, walk and stats (the project's graph).

``recall`` stays the short form (compact lines, a few filters); find is
the whole of keepmem's search: deep (what the results link to), similar_to
(notes like one), since / until / as_of, tags, scope, citations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field

from keepmem_client import _mcp_outputs as out

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from keepmem_client._client import AsyncKeepmem

# find's parameters, as POST /v1/search documents them (shorter: an agent
# reads them with every tool list).
Query = Annotated[str | None, Field(description="What to look for, in words.")]
SimilarTo = Annotated[
    str | None, Field(description="A note id: notes like it (with or without query).")
]
Limit = Annotated[int, Field(description="At most this many results (1-100).")]
Tags = Annotated[
    dict[str, str | list[str]] | None,
    Field(
        description='Every key must match: {"key": "value"}; a list of values: all of them; '
        '"": the key is there.'
    ),
]
Since = Annotated[str | None, Field(description="Changed since: ISO-8601 date or duration (P7D).")]
Until = Annotated[str | None, Field(description="Changed before: ISO-8601 date or duration.")]
AsOf = Annotated[str | None, Field(description="ISO-8601 time: what was believed then.")]
Scope = Annotated[str | None, Field(description="An id glob the results must match (docs/*).")]
Deep = Annotated[
    bool,
    Field(
        description="Also follow edges and shared entities from the top results; what "
        "they reach is in deep_groups."
    ),
]
DeepDepth = Annotated[int | None, Field(description="Hops deep follows (default 10).")]
Cite = Annotated[
    bool, Field(description="A citation with each result (needs the project to keep text).")
]
PerDocument = Annotated[int | None, Field(description="At most this many results of one document.")]
Superseded = Annotated[bool, Field(description="Include memories a newer one replaced.")]
Versions = Annotated[bool, Field(description="Search earlier versions (ID@V{N}) too.")]
Parts = Annotated[bool, Field(description="Search passages (ID@P{N}) too.")]
IncludeSelf = Annotated[bool, Field(description="With similar_to: keep that note in the results.")]
Hidden = Annotated[bool, Field(description="Include system notes (ids starting with a dot).")]
Stages = Annotated[
    Literal["hybrid", "vector", "text"],
    Field(description="hybrid, or by meaning alone (vector) or by words alone (text)."),
]
HalfLife = Annotated[
    float | None,
    Field(description="Half-life of the recency bonus in days (0: none; default: the project's)."),
]
Bias = Annotated[
    dict[str, float] | None,
    Field(description="{id: weight}: 0 excludes, below 1 demotes, above 1 boosts."),
]


def add_tools(server: MCPServer, km: AsyncKeepmem, call: out.Call) -> None:
    """Register find and the graph tools on ``server``."""

    @server.tool(
        description="Find notes and passages by meaning and words, with every filter of "
        "keepmem's find: tags, since / until, as_of, scope; similar_to for notes like one; "
        "deep to follow what the results link to (edge tags, shared entities). cite: each "
        "result with a citation (exact quote, span, page, text hash) to quote and verify "
        "(needs the project to keep text)."
    )
    async def find(
        query: Query = None,
        similar_to: SimilarTo = None,
        limit: Limit = 10,
        tags: Tags = None,
        since: Since = None,
        until: Until = None,
        as_of: AsOf = None,
        scope: Scope = None,
        deep: Deep = False,
        deep_follow_depth: DeepDepth = None,
        cite: Cite = True,
        per_document: PerDocument = None,
        include_superseded: Superseded = False,
        include_versions: Versions = False,
        include_parts: Parts = True,
        include_self: IncludeSelf = False,
        include_hidden: Hidden = False,
        stages: Stages = "hybrid",
        half_life_days: HalfLife = None,
        bias: Bias = None,
    ) -> out.Found:
        result = await call(
            km.find(
                query, similar_to=similar_to, limit=limit, tags=tags, since=since, until=until,
                as_of=as_of, scope=scope, deep=deep, deep_follow_depth=deep_follow_depth,
                cite=cite, per_document=per_document, include_superseded=include_superseded,
                include_versions=include_versions, include_parts=include_parts,
                include_self=include_self, include_hidden=include_hidden, stages=stages,
                half_life_days=half_life_days, bias=bias,
            )
        )  # fmt: skip
        return out.found(result)

    @server.tool(
        description="The people, organisations, places ... the project's notes mention, "
        "most-mentioned first (name: a prefix, any case; kind: person, org, place, ...). "
        "An entity's key starts a walk."
    )
    async def entities(
        name: str | None = None, kind: str | None = None, limit: int = 50
    ) -> out.Entities:
        found = await call(km.entities(name=name, kind=kind, limit=limit))
        return out.Entities.model_validate({"entities": found})

    @server.tool(
        description="Walk the graph from a note (note: its id) or an entity (entity: its "
        "key): the notes and entities within depth hops (1-5) through edge tags, mentions and "
        "relations, nearest first, each with the link that reached it."
    )
    async def walk(
        note: str | None = None, entity: str | None = None, depth: int = 2, limit: int = 200
    ) -> out.Walk:
        found = await call(km.walk(note=note, entity=entity, depth=depth, limit=limit))
        return out.Walk.model_validate(found)

    @server.tool(
        description="What the project's graph holds: entities by kind, mentions, relations "
        "and note edges by predicate, topics, the most-mentioned entities, components."
    )
    async def stats() -> out.GraphStats:
        return out.GraphStats.model_validate(await call(km.graph_stats()))
