"""The web dashboard at /ui, driven in headless Chromium (Selenium) against
keepmem served by uvicorn: sign in, notes, find with per-stage scores, a
note's versions and graph, retrying a dead job, writes arriving live, admin,
and hostile note content shown as text and never run. Screenshots of each
step are saved as test artifacts (tests/browser.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.keys import Keys

from app.main import create_app
from app.search import ranking
from app.settings import Settings
from tests.browser import BROWSER_ZONE, Browser, missing
from tests.conftest import Tenant, serving
from tests.test_pipeline import run_all

FAST = {"events_poll_seconds": 0.05, "rate_limit_per_minute": 0, "auth_failures_per_minute": 0}

HOSTILE = (
    '<script>window.__pwned = "script"</script>'
    "<img src=x onerror=\"window.__pwned = 'img'\">"
    "<svg onload=\"window.__pwned = 'svg'\"></svg>"
)


@pytest.fixture(scope="module")
def live(settings: Settings) -> Iterator[str]:
    with serving(create_app(settings.model_copy(update=FAST))) as url:
        yield url


@pytest.fixture(scope="module")
def browser(live: str) -> Iterator[Browser]:
    problem = missing()
    assert problem is None, problem
    b = Browser(live)
    try:
        yield b
    finally:
        b.close()


@pytest.fixture(autouse=True)
def clean_console(browser: Browser, request: pytest.FixtureRequest) -> Iterator[None]:
    """No test may leave a script error or a CSP violation in the console; a
    failed test leaves a screenshot of where it stopped."""
    browser.errors()
    yield
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        browser.shot(f"FAILED-{request.node.name}")
    assert browser.errors() == []


def put(live: str, t: Tenant, **body: Any) -> dict[str, Any]:
    r = httpx.post(f"{live}/v1/notes", json=body, headers=t.headers, timeout=30)
    assert r.status_code == 200, r.text
    return dict(r.json())


def rows(b: Browser, css: str = "tbody tr") -> list[str]:
    """The ids of the table rows shown (read in one step: the page may redraw)."""
    found = b.run(
        "return [...document.querySelectorAll(arguments[0])].map(r => r.dataset.id || '')", css
    )
    return list(found)


async def test_sign_in_keeps_the_key_out_of_urls_and_cookies(browser: Browser, tenant) -> None:
    b = browser
    b.open()
    assert b.find("form.signin h1").text == "Sign in to keepmem"
    b.find("input[name=key]").send_keys("km_not_a_key\n")
    error = b.find("#signin-error")
    b.until(lambda d: error.text, "the sign-in error")
    assert "invalid" in error.text.lower() or "unknown" in error.text.lower(), error.text
    assert b.run("return sessionStorage.getItem('keepmem.key')") is None
    b.errors()  # the refused sign-in's 401 is logged by the browser, as it should be
    b.sign_in(tenant.key)
    assert b.run("return sessionStorage.getItem('keepmem.key')") == tenant.key
    assert b.driver.get_cookies() == []
    assert tenant.key not in b.driver.current_url
    assert b.unlabelled() == []
    b.find("#sign-out").click()
    b.find("form.signin")
    assert b.run("return sessionStorage.getItem('keepmem.key')") is None


async def test_find_a_note_see_why_open_it_versions_and_graph(
    browser: Browser, live: str, tenant, client, make_pipeline
) -> None:
    b = browser
    put(live, tenant, id="trip", content="Melanie visited Paris with Caroline in May.")
    put(live, tenant, id="trip", content="Melanie visited Lisbon with Caroline in June.")
    put(live, tenant, id="garden", content="Caroline planted tomatoes.", tags={"topic": "home"})
    put(live, tenant, id="bread", content="A recipe for sourdough bread.", tags={"topic": "food"})
    assert set(await run_all(make_pipeline(), client, tenant)) == {"done"}

    b.sign_in(tenant.key)
    b.until(lambda d: {"trip", "garden", "bread"} <= set(rows(b)), "the notes list")
    assert b.unlabelled() == []
    b.shot("notes")
    # filters: a tag and an id prefix
    b.find("input[name=tags]").send_keys("topic=home\n")
    b.until(lambda d: rows(b) == ["garden"], "the tag filter")
    assert "tags=topic%3Dhome" in b.driver.current_url

    b.find("#nav-search").click()
    b.find("input[name=query]").send_keys("Lisbon trip with Caroline\n")
    b.until(lambda d: rows(b, "#results tbody tr")[:1] == ["trip"], "the find result")
    assert b.unlabelled() == []
    top = b.find("#results tbody tr[data-id=trip]")
    stage = {
        c.get_attribute("data-stage"): c.text
        for c in top.find_elements("css selector", "td[data-stage]")
    }
    assert set(stage) == {
        "vector",
        "text",
        "relevance",
        "neighbour",
        "episode",
        "date",
        "tag",
        "recency",
    }
    # its share of the question's words ("lisbon", "caroline" of three, in a
    # note shorter than most: as much as a full match, so 1.0)
    vector, text = float(stage["vector"]), float(stage["text"])
    assert vector > 0.3 and 0.4 < text <= 1.0, stage
    share = ranking.TEXT_SHARE
    assert float(stage["relevance"]) == pytest.approx(share * text + (1 - share) * vector, abs=2e-3)
    assert "mode hybrid" in b.text("#results [role=status]")
    b.shot("search")

    top.find_element("css selector", "td.id a").click()
    b.find("h1.note-id")
    assert b.text("h1.note-id") == "trip"
    # times are UTC, as the API gives them, whatever the browser's zone
    assert b.run("return Intl.DateTimeFormat().resolvedOptions().timeZone") == BROWSER_ZONE
    made = httpx.get(f"{live}/v1/notes/trip", headers=tenant.headers).json()["created_at"]
    assert b.text("dl.meta dd") == made.replace("T", " ")[:19]
    assert "Lisbon" in b.text(".note-summary")
    assert b.text("#versions-title") == "Versions (1 earlier)"
    assert [e.text for e in b.find_all("#diff del")] == ["Paris", "May."]
    assert [e.text for e in b.find_all("#diff ins")] == ["Lisbon", "June."]
    entities = {e.text for e in b.find_all("#entities li a")}
    assert {"Melanie", "Caroline"} <= entities, entities
    assert b.unlabelled() == []
    b.shot("note")

    # tags are editable with a write key
    b.find("input[name=tag-key]").send_keys("mood")
    b.find("input[name=tag-value]").send_keys("happy\n")
    b.until(lambda d: "happy" in b.text("section[aria-labelledby=tags-title] tbody"), "the tag")
    got = httpx.get(f"{live}/v1/notes/trip", headers=tenant.headers).json()
    assert got["tags"]["mood"] == "happy"
    b.find('button[aria-label="Remove tag mood=happy"]').click()
    b.until(lambda d: "happy" not in b.text("section[aria-labelledby=tags-title] tbody"), "removal")
    got = httpx.get(f"{live}/v1/notes/trip", headers=tenant.headers).json()
    assert "mood" not in got["tags"] and got["tags"]["_source"] == "inline"

    b.find("#open-graph").click()
    b.find("svg.graph")
    nodes = {n.get_attribute("data-node") for n in b.find_all("svg.graph g.node")}
    assert "note:trip" in nodes and "entity:person:melanie" in nodes, nodes
    assert b.find_all("svg.graph line.edge"), "no edges drawn"
    b.shot("graph")
    # explore by keyboard: focus the entity and press Enter to walk from it
    melanie = b.find('svg.graph g.node[data-node="entity:person:melanie"]')
    b.run("arguments[0].focus()", melanie)
    melanie.send_keys(Keys.ENTER)
    b.until(lambda d: "entity=person%3Amelanie" in d.current_url, "the walk from the entity")
    b.until(
        lambda d: b.find_all('svg.graph g.node.start[data-node="entity:person:melanie"]'),
        "the graph around the entity",
    )
    assert "note:trip" in {n.get_attribute("data-node") for n in b.find_all("svg.graph g.node")}


async def test_notes_page_through_and_filter_by_time(browser: Browser, live: str, tenant) -> None:
    b = browser
    batch = [{"id": f"n-{i:02d}", "content": f"Note number {i}."} for i in range(30)]
    batch.append({"id": "old", "content": "From long ago.", "created_at": "2020-01-01T00:00:00"})
    r = httpx.post(f"{live}/v1/notes/batch", json={"notes": batch}, headers=tenant.headers)
    assert r.status_code == 200 and r.json()["stored"] == 31, r.text
    b.sign_in(tenant.key)
    b.until(lambda d: len(rows(b)) == 25, "the first page")
    first = rows(b)
    next_page, prev_page = (b.find(f".pager button:nth-child({i})") for i in (2, 1))
    assert not prev_page.is_enabled()
    next_page.click()
    b.until(lambda d: rows(b) and rows(b)[0] not in first, "the second page")
    second = rows(b)
    assert len(second) == 6 and not set(first) & set(second)
    assert set(first) | set(second) == {n["id"] for n in batch}
    b.find(".pager button:nth-child(1)").click()
    b.until(lambda d: rows(b) == first, "the first page again")
    b.find("input[name=until]").send_keys("2021-01-01\n")
    b.until(lambda d: rows(b) == ["old"], "the until filter")
    b.find("input[name=prefix]").send_keys("n-\n")
    b.until(lambda d: "No notes match." in b.text(".count"), "no note both old and n-*")


async def test_retry_a_dead_job(browser: Browser, live: str, tenant, client, make_pipeline) -> None:
    b = browser
    put(live, tenant, uri="http://10.0.0.1/report")
    assert "dead" in await run_all(make_pipeline(), client, tenant)
    b.sign_in(tenant.key)
    b.go("#/jobs?status=dead")
    row = b.find("tr[data-status=dead]")
    job_id = row.get_attribute("data-job")
    assert "refusing" in row.find_element("css selector", "td.error").text
    b.shot("jobs-dead")
    row.find_element("css selector", "button.retry").click()
    b.until(lambda d: "sent back to the queue" in b.text("#status"), "the retry")
    job = httpx.get(f"{live}/v1/jobs/{job_id}", headers=tenant.headers).json()
    assert job["status"] == "pending" and job["attempts"] == 0, job
    b.until(lambda d: not b.find_all(f'tr[data-job="{job_id}"]'), "the dead list to refresh")


async def test_a_new_put_appears_live(browser: Browser, live: str, tenant, other_tenant) -> None:
    b = browser
    b.sign_in(tenant.key)
    b.go("#/live")
    b.find("#events")
    put(
        live,
        tenant,
        id="fresh-1",
        content="Written while the dashboard watched.",
        tags={"by": "agent"},
    )
    item = b.find('#events li[data-note="fresh-1"][data-kind=put]')
    assert "Written while the dashboard watched." in item.text and "by=agent" in item.text
    b.shot("live")
    b.go("#/notes")
    b.find("tbody")
    put(live, tenant, id="fresh-2", content="And another one.")
    b.find('tbody tr.fresh[data-id="fresh-2"]')
    assert rows(b)[0] == "fresh-2"
    # another tenant's writes never arrive
    put(live, other_tenant, id="elsewhere", content="Not yours.")
    put(live, tenant, id="fresh-3", content="Mine again.")
    b.find('tbody tr.fresh[data-id="fresh-3"]')
    assert "elsewhere" not in rows(b)


async def test_hostile_content_is_shown_as_text_and_never_runs(
    browser: Browser, live: str, tenant
) -> None:
    b = browser
    for path in ("/ui", "/ui/static/js/app.js", "/ui/static/js/views/note.js", "/ui/static/ui.css"):
        r = httpx.get(f"{live}{path}")
        assert r.status_code == 200, path
        policy = r.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy, path
        assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy
        assert r.headers["x-content-type-options"] == "nosniff"
    # no way out of the static folder (the router module sits one level up)
    assert httpx.get(f"{live}/ui/static/%2e%2e/router.py").status_code == 404
    b.sign_in(tenant.key)
    b.go("#/live")
    b.find("#events")
    put(
        live,
        tenant,
        id="hostile",
        content=HOSTILE + " A sample of hostile markup.",
        tags={"note": '<img src=x onerror="window.__pwned=1">'},
    )
    b.find('#events li[data-note="hostile"]')
    b.go("#/notes")
    b.until(lambda d: "hostile" in rows(b), "the hostile note in the list")
    b.go("#/note?id=hostile")
    b.until(lambda d: b.text("h1.note-id") == "hostile", "the note page")
    assert b.text(".note-summary") == HOSTILE + " A sample of hostile markup."
    b.go("#/search?query=hostile+markup")
    b.until(lambda d: "hostile" in rows(b, "#results tbody tr"), "the find")
    shown = b.find('#results tr[data-id="hostile"] td.summary').text
    assert shown.startswith('<script>window.__pwned = "script"</script>')
    b.shot("hostile")
    assert b.run("return window.__pwned === undefined")
    # the markup is text: no element from the note made it into the page
    assert b.find_all("main img, main script, main svg:not(.graph), #events img") == []


async def test_admin_keys_and_usage_and_a_read_only_key(
    browser: Browser, live: str, tenant
) -> None:
    b = browser
    put(live, tenant, id="counted", content="One note to count.")
    b.sign_in(tenant.key)
    b.find("#nav-admin").click()
    b.find("#usage")
    assert b.unlabelled() == []
    b.find("input[name=name]").send_keys("reader")
    b.find("input[name=scope-write]").click()  # read only
    b.find("form[aria-label='Create a key'] button[type=submit]").click()
    secret = b.find("#new-key").get_attribute("value")
    assert secret.startswith("km_")
    b.until(lambda d: "reader" in b.text("#keys"), "the new key in the list")
    b.shot("admin")
    listed = httpx.get(f"{live}/v1/keys", headers=tenant.headers).json()["keys"]
    assert [k["scopes"] for k in listed if k["name"] == "reader"] == [["read"]]
    # the read-only key sees notes, no admin section, no tag editing, no retry
    b.sign_in(secret)
    assert b.find_all("#nav-admin") == []
    b.go("#/note?id=counted")
    b.until(lambda d: b.text("h1.note-id") == "counted", "the note page")
    assert b.find_all("input[name=tag-key]") == []
    # a key locked to one project signs in without naming it, and is no admin
    sub = httpx.post(
        f"{live}/v1/subkeys",
        headers=tenant.project("side"),
        json={"name": "side agent", "expires_in_seconds": 600},
    )
    assert sub.status_code == 201, sub.text
    b.sign_in(sub.json()["key"])
    b.until(lambda d: b.run("return document.getElementById('project').value") == "side", "side")
    assert b.find_all("#nav-admin") == []
    assert "No notes match." in b.find(".count").text
    # revoke the reader from the admin key: it stops working
    b.sign_in(tenant.key)
    b.go("#/admin")
    row = b.until(
        lambda d: [r for r in b.find_all("#keys tbody tr") if "reader" in r.text], "the key row"
    )[0]
    button = row.find_element("css selector", "button")
    button.click()
    assert button.text == "Confirm revoke"
    button.click()
    b.until(lambda d: "revoked" in b.text("#status"), "the revocation")
    r = httpx.get(f"{live}/v1/whoami", headers={"Authorization": f"Bearer {secret}"})
    assert r.status_code == 401
