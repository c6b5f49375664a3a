"""Wire schemas of ingest: the crawl request and its receipt."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, Field, StrictInt

from app.ingest.crawl import MIB, Started
from app.kit.storable import json_integer

Depth = Annotated[
    StrictInt,
    Field(ge=0, le=5, description="Links followed from the root (0: the root alone)."),
    BeforeValidator(json_integer),
]
Pages = Annotated[
    StrictInt,
    Field(ge=1, le=500, description="Pages stored at most; the crawl stops there."),
    BeforeValidator(json_integer),
]
Bytes = Annotated[
    StrictInt,
    Field(ge=1, le=200 * MIB, description="Bytes fetched at most; the crawl stops there."),
    BeforeValidator(json_integer),
]


class CrawlIn(BaseModel):
    uri: str = Field(
        min_length=1,
        max_length=2000,
        description="The root page (http or https). It must resolve to a public address "
        "(none of IANA's special-purpose blocks) unless the operator allows the network "
        "(KEEPMEM_FETCH_ALLOW_NETWORKS); every page and redirect is checked the same way.",
    )
    max_depth: Depth = 2
    max_pages: Pages = 50
    max_bytes: Bytes = 20 * MIB
    tags: dict[Annotated[str, Field(max_length=128)], Annotated[str, Field(max_length=1000)]] = (
        Field(
            default_factory=dict,
            max_length=20,
            description="Tags of every page stored; each page also gets `crawl` = the root URL.",
        )
    )
    path_prefix: str | None = Field(
        default=None,
        min_length=1,
        max_length=1000,
        description="Only follow links whose path starts with this (e.g. `/docs/`).",
    )


class CrawlLimitsOut(BaseModel):
    max_depth: int
    max_pages: int
    max_bytes: int


class CrawlStarted(BaseModel):
    job_id: str = Field(description="The crawl's first job; each job's result names the next.")
    uri: str = Field(description="The root, normalised (the id of its note).")
    limits: CrawlLimitsOut
    path_prefix: str | None

    @classmethod
    def of(cls, started: Started) -> CrawlStarted:
        return cls(
            job_id=str(started.job_id),
            uri=started.uri,
            limits=CrawlLimitsOut(**started.limits.as_json()),
            path_prefix=started.path_prefix,
        )
