"""A bounded same-site crawl: a root URL and the pages it links to, each
stored as a note (id = its normalised URL, tag ``crawl`` = the root).

Bounded three ways: depth (links followed from the root), pages stored and
bytes fetched; the crawl stops when either limit is reached. Only the root's
site is crawled (scheme, host and port of the root after its redirects):
links elsewhere are counted, not followed. robots.txt is read once per batch
through the same guarded fetch, and every request — robots.txt, each page,
each redirect — goes through ``app.kit.fetch``, so the address guard judges
every hop: a page that redirects to a refused address is skipped and counted.

The crawl runs as a chain of short jobs: each works through at most
``BATCH_PAGES`` pages and queues the next with the crawl's whole state in
its payload (frontier, URLs seen, pages and bytes used), in the transaction
that finishes it. A worker that dies mid-batch loses nothing: the job runs
again from the state it was given, and storing a page twice changes nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urldefrag, urljoin
from urllib.robotparser import RobotFileParser

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import AppError, BadRequest
from app.ingest import documents
from app.jobs import repository as jobs
from app.jobs.kinds import JobKind
from app.kit import tags as tagrules
from app.kit.fetch import FetchFailed, FetchPolicy, FetchRefused, Target, check, fetch, parse
from app.kit.ids import InvalidId, normalize_id
from app.providers.errors import ProviderError
from app.settings import Settings
from app.tenancy import Scope

BATCH_PAGES = 10  # pages stored by one job
BATCH_FETCHES = 15  # requests one job makes for pages (failures count): a job stays short
MAX_SEEN = 3000  # URLs remembered (the payload carries them from job to job)
MAX_FRONTIER = 1000  # URLs waiting to be fetched
MAX_LINK_CHARS = 2000  # longer links are not followed (they would bloat the payload)
MAX_LINKS_PER_PAGE = 1000
EXAMPLES = 3  # URLs shown per reason a page was skipped
ROBOTS_MAX_BYTES = 512 * 1024  # RFC 9309 asks crawlers to read at least 500 KiB
HTML_TYPES = ("text/html", "application/xhtml+xml")
MIB = 2**20

# What FetchRefused says when the address guard (not the server) said no.
_GUARD_REFUSALS = (
    "refusing to connect",
    "cannot resolve host",
    "has no address",
    "malformed URL",
    "only http and https",
)

Transaction = Callable[[], AbstractAsyncContextManager[AsyncSession]]


@dataclass(frozen=True, slots=True)
class CrawlLimits:
    max_depth: int = 2
    max_pages: int = 50
    max_bytes: int = 20 * MIB

    def as_json(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class Started:
    job_id: uuid.UUID
    uri: str
    limits: CrawlLimits
    path_prefix: str | None


def _site(target: Target) -> str:
    return f"{target.scheme}://{target.authority}"


async def start(
    session: AsyncSession,
    scope: Scope,
    *,
    uri: str,
    limits: CrawlLimits,
    tags: Mapping[str, str],
    path_prefix: str | None,
    policy: FetchPolicy,
) -> Started:
    """Check the root now (the fetch guard, the id rules, the tags) and queue
    the crawl's first batch. A refused root is a 400 and nothing is queued."""
    try:
        await check(uri, policy)
        root = normalize_id(uri)
    except (FetchRefused, InvalidId) as exc:
        raise BadRequest(str(exc)) from exc
    if path_prefix is not None and not path_prefix.startswith("/"):
        raise BadRequest(f"path_prefix must start with '/', not {path_prefix[:100]!r}")
    try:  # every page gets these tags: bad ones fail now, not once per page
        tagrules.user_tag_changes({**tags, "crawl": root})
    except tagrules.InvalidTags as exc:
        raise BadRequest(f"invalid tags: {exc}") from exc
    state = State(
        root=root,
        limits=limits,
        tags=dict(tags),
        path_prefix=path_prefix,
        frontier=[(root, 0)],
        seen={root},
    )
    job_id = await jobs.enqueue(
        session, scope, kind=JobKind.CRAWL, note_id=None, payload=state.payload()
    )
    return Started(await jobs.public_id_of(session, scope, job_id), root, limits, path_prefix)


# -- the state a crawl carries from job to job ----------------------------------------


@dataclass
class State:
    root: str
    limits: CrawlLimits
    tags: dict[str, str]
    path_prefix: str | None
    frontier: list[tuple[str, int]]  # (normalised URL, depth), breadth first
    seen: set[str]  # queued or fetched: never queued again
    site: str = ""  # scheme://authority of the root after its redirects ("" before)
    pages: int = 0
    bytes: int = 0
    batch: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # the whole crawl's counts

    def payload(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "limits": self.limits.as_json(),
            "tags": self.tags,
            "path_prefix": self.path_prefix,
            "frontier": [[u, d] for u, d in self.frontier],
            "seen": sorted(self.seen),
            "site": self.site,
            "pages": self.pages,
            "bytes": self.bytes,
            "batch": self.batch,
            "skipped": self.skipped,
        }

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> State:
        limits = raw.get("limits") or {}
        return cls(
            root=str(raw["root"]),
            limits=CrawlLimits(**{k: int(v) for k, v in limits.items()}),
            tags={str(k): str(v) for k, v in (raw.get("tags") or {}).items()},
            path_prefix=raw.get("path_prefix"),
            frontier=[(str(u), int(d)) for u, d in raw.get("frontier") or []],
            seen={str(u) for u in raw.get("seen") or []},
            site=str(raw.get("site") or ""),
            pages=int(raw.get("pages") or 0),
            bytes=int(raw.get("bytes") or 0),
            batch=int(raw.get("batch") or 0),
            skipped={str(k): int(v) for k, v in (raw.get("skipped") or {}).items()},
        )

    def stop_reason(self) -> str | None:
        if self.pages >= self.limits.max_pages:
            return "max_pages"
        if self.bytes >= self.limits.max_bytes:
            return "max_bytes"
        if not self.frontier:
            return "done"
        return None


@dataclass
class Tally:
    """Why pages were skipped in this batch: counts and a few examples."""

    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)
    _told: set[tuple[str, str]] = field(default_factory=set)

    def skip(self, reason: str, url: str, why: str = "") -> None:
        if (reason, url) in self._told:  # a link on every page is one off-site link
            return
        self._told.add((reason, url))
        self.counts[reason] = self.counts.get(reason, 0) + 1
        shown = self.examples.setdefault(reason, [])
        if len(shown) < EXAMPLES:
            shown.append((f"{url}: {why}" if why else url)[:300])


# -- robots.txt ------------------------------------------------------------------------


def _status(exc: FetchRefused) -> int | None:
    """The HTTP status a refused fetch reports (``... answered HTTP 404``)."""
    _, sep, tail = str(exc).rpartition("answered HTTP ")
    return int(tail) if sep and tail.isdigit() else None


class Robots:
    """Each site's robots.txt, fetched once per batch through the guarded fetch.

    As RFC 9309 says: a robots.txt that is unavailable (a 4xx: none there)
    allows everything; one that cannot be fetched (5xx, 429, unreachable,
    refused by the guard) disallows everything, and the batch says so."""

    def __init__(self, policy: FetchPolicy) -> None:
        self.policy = dataclasses.replace(policy, max_bytes=min(policy.max_bytes, ROBOTS_MAX_BYTES))
        self.rules: dict[str, RobotFileParser | bool] = {}  # a bool: all or nothing
        self.notes: list[str] = []

    async def allows(self, site: str, url: str) -> bool:
        if site not in self.rules:
            self.rules[site] = await self._load(site)
        rules = self.rules[site]
        return rules if isinstance(rules, bool) else rules.can_fetch(self.policy.user_agent, url)

    async def _load(self, site: str) -> RobotFileParser | bool:
        url = f"{site}/robots.txt"
        try:
            got = await fetch(url, self.policy)
        except (FetchRefused, FetchFailed) as exc:
            status = _status(exc) if isinstance(exc, FetchRefused) else None
            if status is not None and 400 <= status < 500:
                return True
            self.notes.append(f"{url} could not be read ({exc}): nothing on {site} crawled")
            return False
        parser = RobotFileParser()
        parser.parse(got.data.decode("utf-8", errors="replace").splitlines())
        return parser


# -- links -----------------------------------------------------------------------------


def links_of(data: bytes, charset: str | None, base_url: str) -> list[str]:
    """The absolute targets of a page's ``<a href>`` (``<base href>`` honoured),
    fragments dropped, in order, each once."""
    import lxml.html
    from lxml import etree

    try:
        text = data.decode(charset or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        text = data.decode("utf-8", errors="replace")
    try:
        root = lxml.html.document_fromstring(text.replace("\x00", ""))
    except (ValueError, etree.ParserError):
        return []
    base = base_url
    found = root.find(".//base[@href]")
    if found is not None:
        base = _join(base_url, str(found.get("href") or "")) or base_url
    out: dict[str, None] = {}
    for href in root.xpath("//a/@href"):
        link = _join(base, str(href).strip())
        if link and link not in out:
            out[link] = None
            if len(out) >= MAX_LINKS_PER_PAGE:
                break
    return list(out)


def _join(base: str, href: str) -> str | None:
    if not href or href.startswith("#"):
        return None
    try:
        return urldefrag(urljoin(base, href))[0]
    except ValueError:
        return None


# -- one batch -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Batch:
    state: State
    result: dict[str, Any]
    more: bool


class _Crawler:
    def __init__(
        self, scope: Scope, state: State, settings: Settings, transaction: Transaction
    ) -> None:
        self.scope, self.state, self.settings = scope, state, settings
        self.transaction = transaction
        self.policy = FetchPolicy.for_settings(settings)
        self.robots = Robots(self.policy)
        self.tally = Tally()
        self.stored: list[str] = []

    async def run(self) -> None:
        state, fetches = self.state, 0
        while (
            len(self.stored) < BATCH_PAGES
            and fetches < BATCH_FETCHES
            and state.stop_reason() is None
        ):
            url, depth = state.frontier.pop(0)
            try:  # checked when it was queued; a payload is read with care all the same
                site = _site(parse(url))
            except FetchRefused as exc:
                self.tally.skip("invalid", url, str(exc))
                continue
            if not await self.robots.allows(site, url):
                self.tally.skip("robots", url)
                continue
            fetches += 1
            await self.visit(url, depth)

    async def visit(self, url: str, depth: int) -> None:
        state, tally = self.state, self.tally
        room = state.limits.max_bytes - state.bytes
        try:
            got = await fetch(
                url, dataclasses.replace(self.policy, max_bytes=min(self.policy.max_bytes, room))
            )
        except FetchRefused as exc:
            tally.skip(_refusal(exc), url, str(exc))
            return
        except FetchFailed as exc:
            tally.skip("error", url, str(exc))
            return
        state.bytes += len(got.data)
        site = _site(parse(got.url))
        state.site = state.site or site  # the root's site, after its redirects
        if site != state.site:
            tally.skip("off_site", url, f"redirected to {got.url}")
            return
        final = _normal(got.url) or url
        if final != url:
            if final in state.seen:
                tally.skip("duplicate", url, f"redirected to {final}")
                return
            state.seen.add(final)
        try:
            doc = await documents.read(
                got.data,
                content_type=got.content_type,
                charset=got.charset,
                max_pdf_pages=self.settings.max_pdf_pages,
            )
        except ProviderError as exc:
            tally.skip("error", url, str(exc))
            return
        links: list[str] = []
        if doc.kind in HTML_TYPES and depth < state.limits.max_depth:
            links = await asyncio.to_thread(links_of, got.data, got.charset, got.url)
        try:
            async with self.transaction() as session:
                await documents.store(
                    session,
                    self.scope,
                    note_id=final,
                    text=doc.text,
                    found_tags=doc.tags,
                    user_tags={**state.tags, "crawl": state.root},
                    content_type=doc.kind,
                    limits=self.settings.limits,
                    uri=got.url,
                    segments=doc.segments,
                )
        except AppError as exc:  # a quota, a tag rule of the project
            tally.skip("error", url, exc.message)
            return
        state.pages += 1
        self.stored.append(final)
        for link in links:
            self.admit(link, depth + 1)

    def admit(self, link: str, depth: int) -> None:
        """Queue a link if it is on the site, under the prefix, new, and fits."""
        state, tally = self.state, self.tally
        if not link.lower().startswith(("http://", "https://")):
            return  # mailto:, javascript:, tel: … are not pages
        if len(link) > MAX_LINK_CHARS:
            tally.skip("invalid", link[:200], "longer than the crawl follows")
            return
        try:
            target = parse(link)
        except FetchRefused as exc:
            tally.skip("invalid", link, str(exc))
            return
        if _site(target) != state.site:
            tally.skip("off_site", link)
            return
        url = _normal(link)
        if url is None:
            tally.skip("invalid", link, "not a valid note id")
            return
        if url in state.seen:
            return
        if state.path_prefix and not target.path.startswith(state.path_prefix):
            tally.skip("outside_prefix", url)
            return
        if len(state.seen) >= MAX_SEEN or len(state.frontier) >= MAX_FRONTIER:
            tally.skip("capped", url)
            return
        state.seen.add(url)
        state.frontier.append((url, depth))

    def batch(self) -> Batch:
        state = self.state
        state.batch += 1
        for reason, n in self.tally.counts.items():
            state.skipped[reason] = state.skipped.get(reason, 0) + n
        stopped = state.stop_reason()
        result: dict[str, Any] = {
            "crawl": state.root,
            "batch": state.batch,
            "stored": self.stored,
            "pages": len(self.stored),
            "skipped": self.tally.counts,
            "examples": self.tally.examples,
            "total_pages": state.pages,
            "total_bytes": state.bytes,
            "total_skipped": state.skipped,
            "frontier": len(state.frontier),
            "stopped": stopped,
        }
        if self.robots.notes:
            result["robots"] = self.robots.notes
        return Batch(state=state, result=result, more=stopped is None)


def _normal(url: str) -> str | None:
    try:
        return normalize_id(url)
    except InvalidId:
        return None


def _refusal(exc: FetchRefused) -> str:
    message = str(exc)
    if any(m in message for m in _GUARD_REFUSALS):
        return "refused"
    if "limit" in message and "bytes" in message:
        return "too_big"
    return "error"  # an HTTP 4xx, a type keepmem cannot read, too many redirects


async def crawl_batch(
    scope: Scope, payload: Mapping[str, Any], *, settings: Settings, transaction: Transaction
) -> Batch:
    """Work through the next pages of a crawl (each stored in a transaction of
    its own); the state after them, and what this batch did."""
    crawler = _Crawler(scope, State.of(payload), settings, transaction)
    await crawler.run()
    return crawler.batch()


async def queue_next(session: AsyncSession, scope: Scope, batch: Batch) -> dict[str, Any]:
    """Queue the crawl's next batch while pages and room remain; the batch's
    result, naming the next job."""
    if not batch.more:
        return {**batch.result, "next_job": None}
    job_id = await jobs.enqueue(
        session, scope, kind=JobKind.CRAWL, note_id=None, payload=batch.state.payload()
    )
    return {**batch.result, "next_job": str(await jobs.public_id_of(session, scope, job_id))}
