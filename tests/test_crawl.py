"""A bounded same-site crawl against local web servers: depth, robots.txt,
off-site links left alone, every hop through the address guard (a redirect
to a refused address is skipped, a refused root is a 400 with nothing
queued), page and byte limits, batches that carry the crawl's state from
job to job, and notes only their tenant sees."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from app.db import Database
from app.main import create_app
from app.settings import Settings
from tests import docs
from tests.conftest import Tenant
from tests.docserver import DocServer, serving
from tests.test_pipeline import jobs_of, run_job

LOCAL = {"fetch_allow_networks": ["127.0.0.1/32"]}


@pytest.fixture(scope="module")
async def local(settings: Settings, db: Database) -> AsyncIterator[httpx.AsyncClient]:
    """The API with loopback allowed to be fetched (as an operator may allow
    an intranet), so a crawl of a server on 127.0.0.1 may start."""
    app = create_app(settings.model_copy(update=LOCAL), db=db)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://keepmem.test") as c:
            yield c


def page(title: str, *links: str, text: str = "") -> str:
    anchors = "".join(f'<li><a href="{href}">{href}</a></li>' for href in links)
    return (
        f"<html><head><title>{title}</title></head><body><nav><ul>{anchors}</ul></nav>"
        f"<main><p>{text or title + ' is a page of the test site.'}</p></main></body></html>"
    )


def html(web: DocServer, path: str, body: str) -> str:
    return web.add(path, body, "text/html; charset=utf-8")


async def start(http: httpx.AsyncClient, t: Tenant, **body: Any) -> httpx.Response:
    return await http.post("/v1/crawl", json=body, headers=t.headers)


async def crawled(pipeline: Any, http: httpx.AsyncClient, t: Tenant) -> list[dict[str, Any]]:
    """Run crawl jobs as a worker would until none is pending; every crawl
    job of the tenant, oldest first."""
    for _ in range(20):
        pending = await jobs_of(http, t, kind="crawl", status="pending")
        if not pending:
            break
        for job in reversed(pending):
            assert await run_job(pipeline, t, job["id"]) == "done"
    return list(reversed(await jobs_of(http, t, kind="crawl")))


async def note(http: httpx.AsyncClient, t: Tenant, note_id: str) -> httpx.Response:
    return await http.get("/v1/notes/" + quote(note_id, safe=""), headers=t.headers)


async def test_a_site_is_crawled_within_depth_robots_and_the_address_guard(
    local, tenant, other_tenant, make_pipeline
) -> None:
    with serving() as web, serving() as elsewhere:
        root = web.url + "/"
        web.add("/robots.txt", "User-agent: *\nDisallow: /private/\n", "text/plain")
        html(
            web,
            "/",
            page(
                "Harbour handbook",
                "/a.html",
                "/a.html#moorings",  # the same page: fragments are dropped
                "private/secret.html",  # robots.txt says no
                elsewhere.url + "/x.html",  # another port is another site
                "http://example.org/away",  # off-site, never resolved
                "/meta",  # redirects to cloud metadata
                "/loop",  # redirects to a loopback address outside the allow-list
                "/doc.pdf",
                "mailto:harbour@example.org",
            ),
        )
        html(web, "/a.html", page("Moorings", "/b.html", "/", text="Moorings cost 12 euros."))
        html(web, "/b.html", page("Buoys", "/c.html"))
        html(web, "/c.html", page("Cranes", "/d.html"))  # depth 3: its links stay
        html(web, "/d.html", page("Depth four"))
        html(web, "/private/secret.html", page("Secret"))
        html(elsewhere, "/x.html", page("Another site"))
        web.redirect("/meta", "http://169.254.169.254/latest/meta-data/")
        web.redirect("/loop", f"http://127.0.0.2:{web.server.server_address[1]}/")
        web.add(
            "/doc.pdf",
            docs.text_pdf(["Harbour dues rose in March"], title="Dues", author="Port"),
            "application/pdf",
        )

        r = await start(local, tenant, uri=root, max_depth=3, tags={"topic": "harbour"})
        assert r.status_code == 202, r.text
        started = r.json()
        assert started["uri"] == root
        assert started["limits"] == {"max_depth": 3, "max_pages": 50, "max_bytes": 20 * 2**20}
        jobs = await crawled(make_pipeline(**LOCAL), local, tenant)

        assert web.routes.hits.count("/robots.txt") == 1
        assert "/d.html" not in web.routes.hits  # beyond the depth
        assert "/private/secret.html" not in web.routes.hits
        assert elsewhere.routes.hits == []
        assert web.routes.hits.count("/a.html") == 1

    (job,) = jobs
    assert job["id"] == started["job_id"] and job["status"] == "done"
    result = job["result"]
    pages = [root, *(web.url + p for p in ("/a.html", "/doc.pdf", "/b.html", "/c.html"))]
    assert sorted(result["stored"]) == sorted(pages)
    assert result["total_pages"] == 5 and result["stopped"] == "done"
    assert result["skipped"] == {"robots": 1, "off_site": 2, "refused": 2}
    refusals = " ".join(result["examples"]["refused"])
    assert "169.254.169.254" in refusals and "127.0.0.2" in refusals
    assert result["next_job"] is None

    got = (await note(local, tenant, web.url + "/a.html")).json()
    assert got["tags"]["crawl"] == root and got["tags"]["topic"] == "harbour"
    assert got["tags"]["title"] == "Moorings"
    pdf = (await note(local, tenant, web.url + "/doc.pdf")).json()
    assert pdf["tags"]["_content_type"] == "application/pdf"
    assert pdf["tags"]["_source_uri"] == web.url + "/doc.pdf"
    for url in (web.url + "/d.html", web.url + "/private/secret.html", elsewhere.url + "/x.html"):
        assert (await note(local, tenant, url)).status_code == 404

    for url in pages:  # another tenant sees none of it
        assert (await note(local, other_tenant, url)).status_code == 404
    listed = await local.get("/v1/notes", headers=other_tenant.headers)
    assert listed.json()["notes"] == []
    assert await jobs_of(local, other_tenant, kind="crawl") == []


async def test_page_and_byte_limits_stop_the_crawl(local, tenant, make_pipeline) -> None:
    with serving() as web:
        root_page = page("Index", *(f"/p{i}.html" for i in range(6)))
        html(web, "/", root_page)
        for i in range(6):
            html(web, f"/p{i}.html", page(f"Page {i}"))
        r = await start(local, tenant, uri=web.url + "/", max_pages=3)
        assert r.status_code == 202, r.text
        (job,) = await crawled(make_pipeline(**LOCAL), local, tenant)
        assert job["result"]["total_pages"] == 3 and len(job["result"]["stored"]) == 3
        assert job["result"]["stopped"] == "max_pages"
        assert [h for h in web.routes.hits if h.endswith(".html")] == ["/p0.html", "/p1.html"]
        listed = await local.get("/v1/notes", headers=tenant.headers)
        assert len(listed.json()["notes"]) == 3

    with serving() as web:
        html(web, "/", root_page)
        size = len(root_page.encode())
        r = await start(local, tenant, uri=web.url + "/", max_bytes=size)
        assert r.status_code == 202, r.text
        jobs = await crawled(make_pipeline(**LOCAL), local, tenant)
        result = jobs[-1]["result"]
        assert result["stored"] == [web.url + "/"] and result["total_bytes"] == size
        assert result["stopped"] == "max_bytes"


async def test_batches_carry_the_crawl_from_job_to_job(local, tenant, make_pipeline) -> None:
    with serving() as web:
        html(web, "/", page("Index", *(f"/p{i}.html" for i in range(14))))
        for i in range(14):
            html(web, f"/p{i}.html", page(f"Page {i}", "/", f"/p{(i + 1) % 14}.html"))
        r = await start(local, tenant, uri=web.url + "/", max_depth=1)
        assert r.status_code == 202, r.text
        first, second = await crawled(make_pipeline(**LOCAL), local, tenant)
        fetched = [h for h in web.routes.hits if h != "/robots.txt"]
        assert sorted(fetched) == sorted(["/", *(f"/p{i}.html" for i in range(14))])
    assert first["result"]["pages"] == 10 and first["result"]["stopped"] is None
    assert first["result"]["next_job"] == second["id"]
    assert second["result"]["pages"] == 5 and second["result"]["total_pages"] == 15
    assert second["result"]["stopped"] == "done" and second["result"]["next_job"] is None
    assert second["result"]["batch"] == 2


async def test_an_unreadable_robots_txt_disallows_everything(local, tenant, make_pipeline) -> None:
    with serving() as web:
        web.add("/robots.txt", "down", "text/plain", status=503)
        html(web, "/", page("Index", "/a.html"))
        r = await start(local, tenant, uri=web.url + "/")
        assert r.status_code == 202, r.text
        (job,) = await crawled(make_pipeline(**LOCAL), local, tenant)
        assert web.routes.hits == ["/robots.txt"]
    result = job["result"]
    assert result["stored"] == [] and result["skipped"] == {"robots": 1}
    assert "HTTP 503" in result["robots"][0] and "nothing on" in result["robots"][0]


async def test_a_refused_root_is_a_400_and_nothing_is_queued(client, local, tenant) -> None:
    for uri in (
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/wiki",
        "http://[::1]:8080/",
    ):
        r = await start(local, tenant, uri=uri)
        assert r.status_code == 400 and "refusing" in r.json()["error"], r.text
    r = await start(local, tenant, uri="ftp://example.org/pub")
    assert r.status_code == 400 and "only http and https" in r.json()["error"]
    with serving() as web:
        # the default settings allow no private network: the local server is refused too
        r = await start(client, tenant, uri=web.url + "/")
        assert r.status_code == 400 and "refusing" in r.json()["error"]
        r = await start(local, tenant, uri=web.url + "/", tags={"bad key": "x"})
        assert r.status_code == 400, r.text
        r = await start(local, tenant, uri=web.url + "/", path_prefix="docs")
        assert r.status_code == 400, r.text
        assert web.routes.hits == []
    for bad in ({"max_depth": 6}, {"max_pages": 0}, {"max_bytes": 201 * 2**20}, {"max_pages": "3"}):
        r = await start(local, tenant, uri="http://example.org/", **bad)
        assert r.status_code == 422, (bad, r.text)
    assert await jobs_of(local, tenant, kind="crawl") == []
    r = await local.post("/v1/crawl", json={"uri": "http://example.org/"})
    assert r.status_code == 401


async def test_path_prefix_keeps_the_crawl_under_a_path(local, tenant, make_pipeline) -> None:
    with serving() as web:
        html(web, "/docs/", page("Docs", "/docs/a.html", "/blog/b.html", "/docs/c.html"))
        html(web, "/docs/a.html", page("A"))
        html(web, "/docs/c.html", page("C"))
        html(web, "/blog/b.html", page("B"))
        r = await start(local, tenant, uri=web.url + "/docs/", path_prefix="/docs/")
        assert r.status_code == 202, r.text
        (job,) = await crawled(make_pipeline(**LOCAL), local, tenant)
        assert "/blog/b.html" not in web.routes.hits
    assert job["result"]["total_pages"] == 3
    assert job["result"]["skipped"] == {"outside_prefix": 1}


def _refused_samples() -> list[str]:
    """An address of every block the fetch guard refuses (the guard's own
    table), one the local allow-list does not let through, as a URL host."""
    import ipaddress

    from app.kit.fetch import SPECIAL_PURPOSE, FetchPolicy

    policy = FetchPolicy.of(max_bytes=1, timeout_seconds=1, allow_networks=["127.0.0.1/32"])
    hosts = []
    for block in SPECIAL_PURPOSE:
        net = block.network
        ip = net[-2] if net.num_addresses > 2 else net[0]
        if policy.refusal(ipaddress.ip_address(ip)) is None:
            continue  # an embedding block whose sample embeds a public address
        hosts.append(f"[{ip}]" if ip.version == 6 else str(ip))
    return hosts


async def test_every_refused_address_is_refused_as_root_and_on_every_hop(
    local, tenant, make_pipeline
) -> None:
    """Each block of the fetch guard's table: a crawl rooted there is a 400,
    and a link of the crawled site that redirects there is skipped as
    refused, never fetched."""
    hosts = _refused_samples()
    assert len(hosts) > 40
    for host in hosts:
        r = await start(local, tenant, uri=f"http://{host}/")
        assert r.status_code == 400 and "refusing" in r.json()["error"], (host, r.text)
    with serving() as web:
        links = [f"/to/{n}" for n in range(len(hosts))]
        for path, host in zip(links, hosts, strict=True):
            web.redirect(path, f"http://{host}:{web.server.server_address[1]}/secret")
        html(web, "/", page("Links everywhere", *links))
        r = await start(local, tenant, uri=web.url + "/", max_depth=1, max_pages=500)
        assert r.status_code == 202, r.text
        jobs = await crawled(make_pipeline(**LOCAL), local, tenant)
    refused = sum(j["result"]["skipped"].get("refused", 0) for j in jobs)
    stored = [u for j in jobs for u in j["result"]["stored"]]
    assert refused == len(hosts) and stored == [web.url + "/"]
