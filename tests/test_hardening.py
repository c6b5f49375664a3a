"""What an outside probe found, one test each: SSRF through IPv6 forms that
embed IPv4, a YAML "billion laughs" upload, URI redaction that moved a URI,
read-only keys creating projects, guessable job ids, stub notes re-queued for
vectors forever, a failing model provider answered 500, and logs flooded by
one failure repeated."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
import tracemalloc
from urllib.parse import quote

import httpx
import pytest
from sqlalchemy import text

from app import tenancy
from app.kit.fetch import FetchPolicy, FetchRefused, check, is_public
from app.kit.redaction import clean, clean_uri
from app.logs import log_failure
from app.main import create_app
from app.pipeline import dispatcher
from app.pipeline.runner import Pipeline
from app.providers.embedding.base import QueryCache
from app.providers.embedding.base import registry as embedders
from app.providers.summarization.base import registry as summarizers
from tests.test_pipeline import jobs_of, put, run_all
from tests.vendors import Vendor, VendorServer

STRICT = FetchPolicy.of(max_bytes=2**20, timeout_seconds=5, allow_networks=[])

# -- SSRF: every IPv4 an IPv6 address carries is judged as IPv4 ---------------------

EMBEDDING_LOOPBACK_OR_PRIVATE = [
    "64:ff9b::7f00:1",  # NAT64 (RFC 6052) of 127.0.0.1
    "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254 (cloud metadata)
    "64:ff9b:1::a00:1",  # local-use NAT64 (RFC 8215) of 10.0.0.1
    "2002:7f00:1::",  # 6to4 of 127.0.0.1
    "2002:a9fe:a9fe::1",  # 6to4 of the metadata address
    "2002:c0a8:101::",  # 6to4 of 192.168.1.1
    "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo, client 127.0.0.1 (obfuscated)
    "::ffff:127.0.0.1",  # IPv4-mapped
    "::ffff:0:7f00:1",  # IPv4-translated (SIIT, RFC 2765)
    "::127.0.0.1",  # IPv4-compatible (deprecated)
    "::a00:1",  # IPv4-compatible 10.0.0.1
    "::1",
    "::",
]


@pytest.mark.parametrize("address", EMBEDDING_LOOPBACK_OR_PRIVATE)
async def test_ipv6_forms_embedding_private_ipv4_are_refused(address: str) -> None:
    assert not is_public(ipaddress.ip_address(address))
    with pytest.raises(FetchRefused):
        await check(f"http://[{address}]/", STRICT)


@pytest.mark.parametrize("address", ["64:ff9b::808:808", "2002:808:808::1", "2606:4700:4700::1111"])
def test_ipv6_forms_of_public_addresses_stay_public(address: str) -> None:
    assert is_public(ipaddress.ip_address(address))


# -- YAML bomb ------------------------------------------------------------------------

BILLION_LAUGHS = (
    b"---\n"
    b'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    b"b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
    b"c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
    b"d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
    b"e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
    b"f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
    b"g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"
    b"h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\n"
    b"i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]\n"
    b"title: bomb\n"
    b"---\n"
    b"The body of the document.\n"
)


async def test_yaml_bomb_upload_is_bounded_and_health_stays_responsive(client, tenant) -> None:
    tracemalloc.start()
    try:
        upload = asyncio.create_task(
            client.post(
                "/v1/upload",
                files={"file": ("bomb.md", BILLION_LAUGHS, "text/markdown")},
                headers=tenant.headers,
            )
        )
        began = time.monotonic()
        health = await client.get("/v1/health")
        health_took = time.monotonic() - began
        r = await upload
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert health.status_code == 200
    assert health_took < 2.0, health_took  # before: stalled 4.2 s behind the parser
    assert peak < 64 * 2**20, f"peak {peak / 2**20:.0f} MiB"  # before: +470 MB
    assert r.status_code == 200, r.text
    note = r.json()
    # the front matter with aliases is not expanded into tags; the text is kept
    assert "lol" not in str(note["tags"])
    got = await client.get(f"/v1/notes/{quote(note['id'], safe='')}", headers=tenant.headers)
    assert got.status_code == 200


async def test_plain_front_matter_still_becomes_tags(client, tenant) -> None:
    doc = b"---\ntitle: Trip notes\ntopics: [sea, boats]\n---\nWe sailed at dawn.\n"
    r = await client.post(
        "/v1/upload", files={"file": ("trip.md", doc, "text/markdown")}, headers=tenant.headers
    )
    assert r.status_code == 200, r.text
    assert r.json()["tags"]["title"] == "Trip notes"
    assert r.json()["tags"]["topics"] == "sea, boats"


# -- redaction never moves a URI ------------------------------------------------------


@pytest.mark.parametrize(
    "uri",
    [
        "http://127.0.0.1:18901#@example.com/",
        "http://127.0.0.1:18901?x=1@example.com/",
        "http://127.0.0.1:18901/a:b@example.com/",
        "https://example.com#user:pass@evil.test/",
    ],
)
def test_redaction_never_changes_scheme_host_or_port(uri: str) -> None:
    from urllib.parse import urlsplit

    for cleaned in (clean_uri(uri), clean(uri)):
        before, after = urlsplit(uri), urlsplit(cleaned)
        assert (after.scheme, after.hostname, after.port) == (
            before.scheme,
            before.hostname,
            before.port,
        ), cleaned


def test_real_url_passwords_are_still_removed() -> None:
    assert clean_uri("https://bob:hunter2@example.com:8443/x") == "https://bob@example.com:8443/x"
    assert "hunter2" not in clean("see https://bob:hunter2@example.com/x for it")


async def test_put_by_uri_keeps_the_host_it_names(client, tenant) -> None:
    r = await client.post(
        "/v1/notes", json={"uri": "http://127.0.0.1:18901#@example.com/"}, headers=tenant.headers
    )
    assert r.status_code == 200, r.text
    assert r.json()["id"].startswith("http://127.0.0.1:18901")


# -- projects -------------------------------------------------------------------------


async def test_read_only_key_cannot_create_projects(client, tenant, db) -> None:
    r = await client.post(
        "/v1/keys", json={"name": "ro", "scopes": ["read"]}, headers=tenant.headers
    )
    ro = {"Authorization": f"Bearer {r.json()['key']}"}
    for i in range(5):
        r = await client.get("/v1/notes", headers={**ro, "X-Project": f"probe-{i}"})
        assert r.status_code == 404 and r.json()["code"] == "project_not_found", r.text
    async with tenancy.tenant_id_transaction(db, tenant.id) as s:
        projects = await s.scalar(
            text("SELECT count(*) FROM projects WHERE tenant_id = :t"), {"t": tenant.id}
        )
    assert projects == 1  # only "default"
    # a project a writer made is readable with the read-only key
    await client.post("/v1/notes", json={"content": "x"}, headers=tenant.project("shared"))
    r = await client.get("/v1/notes", headers={**ro, "X-Project": "shared"})
    assert r.status_code == 200 and r.json()["count"] == 1


async def test_projects_per_tenant_are_capped(settings, db, tenant) -> None:
    app = create_app(settings.model_copy(update={"max_projects_per_tenant": 3}), db=db)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c,
    ):
        codes = [
            (await c.get("/v1/notes", headers=tenant.project(f"p-{i}"))).status_code
            for i in range(4)
        ]
        assert codes == [200, 200, 403, 403]  # "default" is the first of the three
        r = await c.get("/v1/notes", headers=tenant.project("p-9"))
        assert r.json()["code"] == "project_limit"
        assert (await c.get("/v1/notes", headers=tenant.project("p-0"))).status_code == 200


async def test_empty_project_header_is_refused(client, tenant) -> None:
    r = await client.get("/v1/notes", headers={**tenant.headers, "X-Project": ""})
    assert r.status_code == 400


# -- job and task ids -----------------------------------------------------------------


async def test_job_and_task_ids_reveal_nothing_across_tenants(client, tenant, other_tenant) -> None:
    await put(client, tenant, content="first", id="a")
    await put(client, other_tenant, content="theirs", id="b")
    await put(client, tenant, content="second", id="c")
    mine = [j["id"] for j in await jobs_of(client, tenant)]
    theirs = [j["id"] for j in await jobs_of(client, other_tenant)]
    import uuid

    for job_id in mine + theirs:
        assert uuid.UUID(job_id).version == 4  # random, not a sequence
    for job_id in theirs:
        r = await client.get(f"/v1/jobs/{job_id}", headers=tenant.headers)
        assert r.status_code == 404
    r = await client.post(
        "/v1/tasks", json={"task_type": "summarize", "content": "x y z"}, headers=tenant.headers
    )
    task_id = r.json()["task_id"]
    assert uuid.UUID(task_id).version == 4
    assert (
        await client.get(f"/v1/tasks/{task_id}", headers=other_tenant.headers)
    ).status_code == 404
    # paging by a job id of the list
    first = await client.get("/v1/jobs", params={"limit": 1}, headers=tenant.headers)
    after = first.json()["next_before"]
    assert after == first.json()["jobs"][0]["id"]
    rest = await client.get("/v1/jobs", params={"before": after}, headers=tenant.headers)
    assert after not in [j["id"] for j in rest.json()["jobs"]] and rest.json()["jobs"]


# -- stubs need no vector -------------------------------------------------------------


async def test_stub_notes_get_no_reindex_jobs(client, tenant, make_pipeline) -> None:
    """An edge tag makes a stub target with no text: reconcile must not queue a
    reindex for it (before: a new dead job at every worker start and every 300 s)."""
    # "speaker" is an edge tag in every project (its .tag/speaker has _inverse)
    await put(client, tenant, content="Hello there.", id="line-1", tags={"speaker": "Ada"})
    pipeline = make_pipeline()
    await run_all(pipeline, client, tenant)
    stub = await client.get("/v1/notes/Ada", headers=tenant.headers)
    assert stub.status_code == 200 and stub.json()["summary"] == ""
    for _ in range(2):
        await dispatcher.reconcile(pipeline)
    kinds = [j["kind"] for j in await jobs_of(client, tenant, note_id="Ada")]
    assert "reindex" not in kinds and "embed" not in kinds, kinds


# -- a failing provider is a 503, not a 500 -------------------------------------------


async def test_embedding_provider_down_find_answers_from_full_text(settings, db, tenant) -> None:
    """A hybrid find with the embedder down answers from its full-text stage
    (200, mode "text", a Warning header); a vector-only find has nothing else
    to answer with (503, Retry-After)."""
    vendor = Vendor(dim=8)
    with VendorServer(vendor) as server:
        hosted = {
            "embedding_provider": "openai",
            "embedding_model": "m-503",
            "embedding_dim": 8,
            "embedding_base_url": server.url + "/v1",
        }
        embedder = embedders.create("openai", model="m-503", dim=8, base_url=server.url + "/v1")
        pipeline = Pipeline(
            db=db,
            settings=settings.model_copy(update=hosted),
            embedder=embedder,
            summarizer=summarizers.create("extractive"),
            query_cache=QueryCache(),
        )
        app = create_app(settings.model_copy(update=hosted), db=db)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c,
        ):
            await put(c, tenant, content="The harbour at dawn.", id="h")
            await run_all(pipeline, c, tenant)
            ok = await c.post("/v1/search", json={"query": "harbour"}, headers=tenant.headers)
            assert ok.status_code == 200 and ok.json()["mode"] == "hybrid"
            vendor.fail_status, vendor.fail_times = 503, -1
            # a question not asked before: its vector is not in the query cache
            q = {"query": "harbour at dawn"}
            hybrid = await c.post("/v1/search", json=q, headers=tenant.headers)
            compact = await c.post("/v1/search/compact", json=q, headers=tenant.headers)
            vector = await c.post(
                "/v1/search", json={**q, "stages": "vector"}, headers=tenant.headers
            )
            vendor.fail_times = 0  # the provider is back: hybrid again, no warning
            again = await c.post("/v1/search", json=q, headers=tenant.headers)
        await embedder.aclose()
    assert hybrid.status_code == 200, hybrid.text
    assert hybrid.json()["mode"] == "text"
    assert [n["id"] for n in hybrid.json()["notes"]] == ["h"]
    assert "full-text stage" in hybrid.headers["warning"]
    assert compact.status_code == 200 and compact.json()["mode"] == "text"
    assert "warning" in compact.headers
    assert vector.status_code == 503, vector.text
    body = vector.json()
    assert body["code"] == "provider_unavailable" and body["request_id"]
    assert vector.headers["retry-after"]
    assert again.status_code == 200 and again.json()["mode"] == "hybrid"
    assert "warning" not in again.headers


# -- logs -----------------------------------------------------------------------------


def test_repeated_failures_log_one_line_per_kind(caplog) -> None:
    logger = logging.getLogger("keepmem.test-logs")
    caplog.set_level(logging.WARNING, logger=logger.name)
    for _ in range(500):
        log_failure(logger, "database unavailable (request_id=x)", ConnectionRefusedError("no"))
    log_failure(logger, "database unavailable (request_id=y)", TimeoutError("slow"))
    lines = [r for r in caplog.records if r.name == logger.name]
    assert len(lines) == 2
    assert all(r.exc_info is None for r in lines)  # no traceback for an outage
    assert "ConnectionRefusedError" in lines[0].getMessage()
    assert "TimeoutError" in lines[1].getMessage()
