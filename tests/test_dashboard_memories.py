"""The dashboard's Memories page in headless Chromium against keepmem served
by uvicorn: messages sent through ``POST /v1/threads/{id}/messages`` and
read by the real worker's extraction, then the current memory in the list,
the user filter, superseded memories toggled in, what was believed as of a
time, one memory with its source message and the history of its slot, a bad
"as of" refused with the form kept, and a hostile statement shown as text,
never run."""

from __future__ import annotations

import uuid

import httpx

from tests.browser import Browser
from tests.test_dashboard import HOSTILE, browser, clean_console, live, rows  # noqa: F401
from tests.test_sessions import digest

LISBON = "Dana: I live in Lisbon."


def cell(b: Browser, memory_id: str, name: str, where: str = "#memories") -> str:
    return b.text(f'{where} tr[data-id="{memory_id}"] td.{name}')


async def test_memories_list_filters_history_and_sources(
    browser: Browser,  # noqa: F811
    live: str,  # noqa: F811
    tenant,
    client,
    make_pipeline,
) -> None:
    b = browser
    tid = f"dana-{uuid.uuid4().hex[:6]}"
    messages = [
        {"role": "user", "name": "Dana", "content": "I live in Lisbon.",
         "time": "2024-01-10T09:00:00Z"},
        {"role": "assistant", "content": "Lisbon has lovely light.",
         "time": "2024-01-10T09:00:05Z"},
        {"role": "user", "name": "Dana", "content": "I moved to Porto last month.",
         "time": "2024-05-02T09:00:00Z"},
    ]  # fmt: skip
    r = httpx.post(
        f"{live}/v1/threads/{tid}/messages",
        json={"messages": messages, "user_id": "dana", "agent_id": "guide"},
        headers=tenant.headers,
    )
    assert r.status_code == 202 and r.json()["extraction"] == "queued", r.text
    r = httpx.post(
        f"{live}/v1/memories",
        json={"statement": HOSTILE, "subject": "Mallory", "user_id": "mallory"},
        headers=tenant.headers,
    )
    assert r.status_code == 200, r.text
    hostile = r.json()["memory"]
    await digest(make_pipeline, client, tenant)

    # what the API says, to hold the page to
    every = httpx.get(
        f"{live}/v1/memories",
        params={"user_id": "dana", "include_superseded": "true"},
        headers=tenant.headers,
    ).json()["memories"]
    by_value = {m["value"]: m for m in every if m["attribute"] == "lives_in"}
    porto, lisbon = by_value["Porto"], by_value["Lisbon"]
    assert porto["current"] and lisbon["superseded_by"] == porto["id"]
    assert HOSTILE in hostile["statement"]

    # the list: current memories only, each with its slot and certainty
    b.sign_in(tenant.key)
    b.find("#nav-memories").click()
    b.until(lambda d: {porto["id"], hostile["id"]} <= set(rows(b, "#memories tbody tr")), "list")
    assert b.find("#nav-memories").get_attribute("aria-current") == "page"
    assert lisbon["id"] not in rows(b, "#memories tbody tr")
    assert cell(b, porto["id"], "statement") == porto["statement"] == "Dana lives in Porto"
    assert cell(b, porto["id"], "subject") == "Dana"
    assert cell(b, porto["id"], "attribute") == "lives_in"
    assert cell(b, porto["id"], "value") == "Porto"
    assert cell(b, porto["id"], "certainty") == "candidate (unconfirmed) · 0.50"
    assert cell(b, porto["id"], "state") == "current"
    assert b.unlabelled() == []
    b.shot("memories")

    # one user's
    b.find("input[name=user_id]").send_keys("dana\n")
    b.until(lambda d: "user_id=dana" in d.current_url, "the user in the route")
    b.until(lambda d: rows(b, "#memories tbody tr") == [porto["id"]], "dana's memories only")

    # superseded toggled in: the old city too, marked so
    b.find("input[name=include_superseded]").click()
    b.until(lambda d: "include_superseded=true" in d.current_url, "the toggle in the route")
    b.until(
        lambda d: rows(b, "#memories tbody tr") == [porto["id"], lisbon["id"]],
        "current and superseded",
    )
    assert "user_id=dana" in b.driver.current_url
    assert cell(b, lisbon["id"], "state") == "superseded"
    assert cell(b, porto["id"], "state") == "current"
    b.shot("memories-superseded")

    # one memory: its source message and its slot's history
    b.find(f'#memories tr[data-id="{lisbon["id"]}"] td.statement a').click()
    b.until(lambda d: b.text("#memory-title") == f"Memory {lisbon['id']}", "the memory")
    assert b.text("#memory .memory-statement") == "Dana lives in Lisbon"
    assert b.text("#memory dd.state").startswith("superseded at 2024-05-02 09:00:00 by ")
    assert porto["id"] in b.text("#memory dd.state")
    assert b.find(f'#memories tr[data-id="{lisbon["id"]}"]').get_attribute("aria-current")
    assert rows(b, "#memory-sources tbody tr") == [f"thread/{tid}/000000"]
    assert cell(b, f"thread/{tid}/000000", "summary", "#memory-sources") == LISBON
    assert rows(b, "#memory-history tbody tr") == [lisbon["id"], porto["id"]]
    assert cell(b, lisbon["id"], "state", "#memory-history") == "superseded"
    assert cell(b, porto["id"], "state", "#memory-history") == "current"
    assert b.text("#versions-title") == "Earlier wordings (0)"
    assert b.unlabelled() == []
    b.shot("memory")
    # the next belief, from the history
    b.find(f'#memory-history tr[data-id="{porto["id"]}"] a').click()
    b.until(lambda d: b.text("#memory-title") == f"Memory {porto['id']}", "the next memory")
    assert b.text("#memory dd.state") == "current"
    assert rows(b, "#memory-sources tbody tr") == [f"thread/{tid}/000002"]

    # believed as of a time: the toggle off, then a date
    b.find("input[name=include_superseded]").click()
    b.until(lambda d: "include_superseded" not in d.current_url, "the toggle off")
    b.find("input[name=as_of]").send_keys("2024-02-01\n")
    b.until(lambda d: "as_of=2024-02-01" in d.current_url, "as of in the route")
    b.until(lambda d: rows(b, "#memories tbody tr") == [lisbon["id"]], "what was believed then")

    # a bad time: keepmem's reason, and the form to correct it
    b.go("#/memories?as_of=soon")
    b.until(lambda d: "invalid as_of" in b.text("#alert"), "the refusal")
    assert b.find("input[name=as_of]").get_attribute("value") == "soon"
    b.errors()  # the browser logs the refused request, as it should

    # the hostile statement: text in the list and in the detail, never markup
    b.go(f"#/memories?subject=Mallory&id={hostile['id']}")
    b.until(lambda d: b.text("#memory-title") == f"Memory {hostile['id']}", "hostile memory")
    assert b.find("#memory .memory-statement").text == hostile["statement"]
    assert (
        b.find(f'#memories tr[data-id="{hostile["id"]}"] td.statement').text
        == (hostile["statement"])
    )
    b.shot("memory-hostile")
    assert b.run("return window.__pwned === undefined")
    assert b.find_all("main img, main script, main svg") == []
