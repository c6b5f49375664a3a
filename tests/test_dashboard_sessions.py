"""The dashboard's Sessions page in headless Chromium against keepmem served
by uvicorn: hook events sent through ``POST /v1/sessions/events`` and
digested by the real worker code, then the sessions list, one session's
paged and filtered timeline, its checkpoint text with its line breaks, the
recurring error across both sessions, injection turned off and on again
(checked through the API), and a hostile prompt shown as text, never run."""

from __future__ import annotations

import uuid

import httpx
from selenium.webdriver.support.ui import Select

from tests.browser import Browser
from tests.test_dashboard import HOSTILE, browser, clean_console, live, rows  # noqa: F401
from tests.test_sessions import digest, ev, failing_test, send

CWD = "/home/dev/shop"
COMPACT = (
    "Summary of the work so far: the cart total is fixed.\n\n"
    "Pending Tasks:\n- Ship the refund fix\n- Write tests for the refund path\n"
)
STEPS = 30  # tool results in the first session: more than a timeline page (25)


def data(b: Browser, css: str, key: str) -> list[str]:
    """One data attribute of each match (read in one step: the page may redraw)."""
    found = b.run(
        "return [...document.querySelectorAll(arguments[0])].map(r => r.dataset[arguments[1]])",
        css,
        key,
    )
    return list(found)


def session_rows(b: Browser) -> list[str]:
    return data(b, "#sessions tbody tr", "session")


async def test_sessions_timeline_checkpoints_patterns_and_switches(
    browser: Browser,  # noqa: F811
    live: str,  # noqa: F811
    tenant,
    client,
    make_pipeline,
) -> None:
    b = browser
    first, second = (f"s-{uuid.uuid4().hex[:8]}" for _ in range(2))
    await send(
        client,
        tenant,
        ev(first, "session_start", cwd=CWD, source="startup"),
        ev(first, "prompt", cwd=CWD, prompt="make the cart total right"),
        failing_test(first, 3, 41),
        *(
            ev(
                first,
                "tool_result",
                tool_name="Bash",
                tool_input={"command": f"echo step {i}"},
                tool_output=f"step {i} done",
            )
            for i in range(STEPS)
        ),
        ev(first, "pre_compact", trigger="auto"),
        ev(first, "post_compact", trigger="auto", compact_summary=COMPACT),
    )
    await send(
        client,
        tenant,
        ev(second, "prompt", cwd=CWD, prompt=HOSTILE + " and fix the cart"),
        failing_test(second, 4, 42),
    )
    await digest(make_pipeline, client, tenant)

    # what the API says, to hold the page to
    listed = httpx.get(f"{live}/v1/sessions", headers=tenant.headers).json()["sessions"]
    assert {s["session_id"] for s in listed} == {first, second}
    hostile_summary = next(s["summary"] for s in listed if s["session_id"] == second)
    assert HOSTILE in hostile_summary
    everything = httpx.get(
        f"{live}/v1/sessions/{first}/timeline", params={"limit": 500}, headers=tenant.headers
    ).json()
    all_ids = [i["id"] for i in everything["items"]]
    assert len(all_ids) > 25 and everything["next_cursor"] is None

    # the list: both sessions, with their state
    b.sign_in(tenant.key)
    b.find("#nav-sessions").click()
    b.until(lambda d: set(session_rows(b)) == {first, second}, "both sessions in the list")
    assert b.find("#nav-sessions").get_attribute("aria-current") == "page"
    row = b.find(f'#sessions tr[data-session="{first}"]')
    assert "claude-code" in row.text and CWD in row.text
    assert row.find_element("css selector", "td.inject").text == "on"
    assert b.unlabelled() == []

    # the recurring error: once in each session, so twice in two sessions
    pattern = b.find("#patterns tbody tr[data-kind=error]")
    assert pattern.find_element("css selector", "td.count").text == "2"
    assert "tests/test_cart.py" in pattern.find_element("css selector", "td.files").text
    linked = {a.text for a in pattern.find_elements("css selector", "td.sessions a")}
    assert linked == {first, second}
    b.shot("sessions")

    # one session: its timeline, paged
    row.find_element("css selector", "td.id a").click()
    b.until(lambda d: b.text("#session-title") == f"Session {first}", "the session")
    b.until(lambda d: rows(b, "#timeline tbody tr") == all_ids[:25], "the timeline's first page")
    assert f"id={first}" in b.driver.current_url
    assert b.find(f'#sessions tr[data-session="{first}"]').get_attribute("aria-current") == "true"
    b.find("#timeline .pager button:nth-child(2)").click()
    b.until(lambda d: rows(b, "#timeline tbody tr") == all_ids[25:], "the timeline's next page")
    assert not b.find("#timeline .pager button:nth-child(2)").is_enabled()
    b.find("#timeline .pager button:nth-child(1)").click()
    b.until(lambda d: rows(b, "#timeline tbody tr") == all_ids[:25], "the first page again")

    # its checkpoint: the compaction summary, line breaks kept, as text
    assert b.text("#checkpoints-title") == "Checkpoints (1)"
    text = b.text("#checkpoints .checkpoint-text")
    assert "Pending Tasks:\n- Ship the refund fix" in text, text
    assert b.text("#checkpoints .kind") == "compaction"
    assert b.unlabelled() == []
    b.shot("session")

    # the timeline by kind
    Select(b.find("select[name=kind]")).select_by_value("tool_failure")
    b.find("form[aria-label='Filter the timeline'] button[type=submit]").click()
    b.until(lambda d: "kind=tool_failure" in d.current_url, "the kind in the route")
    b.until(
        lambda d: data(b, "#timeline tbody tr", "kind") == ["tool_failure"], "the failures only"
    )
    assert "AssertionError" in b.text("#timeline tbody td.summary")

    # injection off: the API says so, and so does the page after a reload
    b.find("#session input[name=inject]").click()
    b.until(lambda d: f"Injection off for session {first}." in b.text("#status"), "injection off")
    got = httpx.get(f"{live}/v1/sessions/{first}", headers=tenant.headers).json()
    assert got["inject"] is False and got["capture"] is True, got
    assert b.text(f'#sessions tr[data-session="{first}"] td.inject') == "off"
    b.driver.refresh()
    b.until(lambda d: b.text("#session-title") == f"Session {first}", "the session again")
    assert b.run("return document.querySelector('#session input[name=inject]').checked") is False
    assert b.run("return document.querySelector('#session input[name=capture]').checked") is True
    # and back on
    b.find("#session input[name=inject]").click()
    b.until(lambda d: f"Injection on for session {first}." in b.text("#status"), "injection on")
    got = httpx.get(f"{live}/v1/sessions/{first}", headers=tenant.headers).json()
    assert got["inject"] is True, got

    # the hostile prompt: text in the list and on the timeline, never markup
    b.go(f"#/sessions?id={second}")
    b.until(lambda d: b.text("#session-title") == f"Session {second}", "the other session")
    b.until(lambda d: b.find_all("#timeline tbody tr[data-kind=prompt]"), "its prompt")
    shown = b.find("#timeline tbody tr[data-kind=prompt] td.summary").text
    assert HOSTILE in shown, shown
    assert b.find(f'#sessions tr[data-session="{second}"] td.summary').text == hostile_summary
    assert b.find("#session p.session-summary").text == hostile_summary
    b.shot("session-hostile")
    assert b.run("return window.__pwned === undefined")
    assert b.find_all("main img, main script, main svg") == []
