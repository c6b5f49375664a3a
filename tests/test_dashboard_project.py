"""The dashboard's note writing and its Project page in headless Chromium
against keepmem served by uvicorn: a note created, given a new version and
deleted (after a confirm step) from the browser and checked through the API;
an id the API refuses shown with its reason; the project's settings read and
the recency half-life changed with an admin key, and read-only for a read
key (which sees no writing controls anywhere); a singular tag rule made in
the browser, so that through the API a second value replaces the first;
values allowed for a constrained rule; and a bad regex refused with the
API's 400 message."""

from __future__ import annotations

import uuid

import httpx

from tests.browser import Browser
from tests.conftest import Tenant
from tests.test_dashboard import browser, clean_console, live, rows  # noqa: F401

PROJECT_FORM = "form[aria-label='Project settings']"
RULE_FORM = "form[aria-label='Create or edit a tag rule']"
NONE = "\N{EN DASH}"  # what the rules table shows for "not set"


def api_get(base: str, t: Tenant, path: str) -> httpx.Response:
    return httpx.get(f"{base}{path}", headers=t.headers, timeout=30)


def reader_key(base: str, t: Tenant) -> str:
    r = httpx.post(
        f"{base}/v1/keys",
        json={"name": f"reader-{uuid.uuid4().hex[:6]}", "scopes": ["read"]},
        headers=t.headers,
    )
    assert r.status_code == 201, r.text
    return str(r.json()["key"])


def type_into(b: Browser, css: str, text: str) -> None:
    box = b.find(css)
    box.clear()
    box.send_keys(text)


async def test_create_edit_and_delete_a_note(
    browser: Browser,  # noqa: F811
    live: str,  # noqa: F811
    tenant,
) -> None:
    b = browser
    b.sign_in(tenant.key)
    b.find("#new-note summary").click()
    assert b.unlabelled() == []
    # an id keepmem refuses: its reason, and nothing stored
    type_into(b, "textarea[name=new-content]", "Plan the spring garden.")
    type_into(b, "input[name=new-id]", "bad<id")
    b.find("form[aria-label='New note'] button[type=submit]").click()
    b.until(lambda d: "invalid characters" in b.text("#new-note-error"), "the refusal")
    b.errors()  # the browser logs the refused request, as it should

    type_into(b, "input[name=new-id]", "garden-plan")
    type_into(b, "input[name=new-tags]", "topic=garden, season=spring")
    b.find("form[aria-label='New note'] button[type=submit]").click()
    b.until(lambda d: b.text("h1.note-id") == "garden-plan", "the new note's page")
    got = api_get(live, tenant, "/v1/notes/garden-plan").json()
    assert got["summary"] == "Plan the spring garden."
    assert got["tags"]["topic"] == "garden" and got["tags"]["season"] == "spring"
    assert b.text(".note-summary") == "Plan the spring garden."
    assert b.unlabelled() == []
    b.shot("note-created")

    # a new version: its text and summary
    assert b.find("textarea[name=edit-content]").get_attribute("value") == got["summary"]
    type_into(b, "textarea[name=edit-content]", "Plan the spring garden: tomatoes and beans.")
    type_into(b, "input[name=edit-summary]", "Spring garden: tomatoes, beans")
    b.find("form[aria-label='Edit this note'] button[type=submit]").click()
    b.until(lambda d: b.text(".note-summary") == "Spring garden: tomatoes, beans", "the edit")
    got = api_get(live, tenant, "/v1/notes/garden-plan").json()
    assert got["summary"] == "Spring garden: tomatoes, beans"
    assert got["tags"]["topic"] == "garden"
    versions = api_get(live, tenant, "/v1/notes/garden-plan/versions").json()
    assert versions["count"] == 1
    assert versions["versions"][0]["summary"] == "Plan the spring garden."
    b.until(lambda d: b.text("#versions-title") == "Versions (1 earlier)", "the versions")
    b.shot("note-edited")

    # delete: the first click only arms the button, Cancel disarms it
    remove = b.find("#delete-note")
    remove.click()
    assert remove.text == "Confirm delete (with its history)"
    b.find("#delete-cancel").click()
    assert remove.text == "Delete note"
    assert api_get(live, tenant, "/v1/notes/garden-plan").status_code == 200
    remove.click()
    remove.click()
    b.until(lambda d: "was deleted" in b.text("#deleted"), "the deletion")
    assert api_get(live, tenant, "/v1/notes/garden-plan").status_code == 404
    b.shot("note-deleted")
    b.find("#main a[href='#/notes']").click()
    b.until(lambda d: "garden-plan" not in rows(b), "the list without it")


async def test_settings_with_an_admin_key_and_read_only(
    browser: Browser,  # noqa: F811
    live: str,  # noqa: F811
    tenant,
) -> None:
    b = browser
    before = api_get(live, tenant, "/v1/settings")
    assert before.status_code == 200, before.text
    assert before.json()["decay_half_life_days"] != 7

    b.sign_in(tenant.key)
    b.find("#nav-project").click()
    b.find(f"{PROJECT_FORM} button[type=submit]")
    assert b.find("#nav-project").get_attribute("aria-current") == "page"
    half_life = b.find("input[name=decay_half_life_days]")
    assert float(half_life.get_attribute("value")) == before.json()["decay_half_life_days"]
    assert b.find("input[name=sanitize]").is_selected() == before.json()["sanitize"]
    assert b.find_all("#settings-readonly") == []
    assert b.unlabelled() == []
    b.shot("project-settings")
    type_into(b, "input[name=decay_half_life_days]", "7")
    b.find(f"{PROJECT_FORM} button[type=submit]").click()
    b.until(lambda d: "Settings saved: decay_half_life_days" in b.text("#status"), "saved")
    after = api_get(live, tenant, "/v1/settings").json()
    assert after["decay_half_life_days"] == 7
    # only what changed was sent: the rest stands
    assert {k: v for k, v in after.items() if k != "decay_half_life_days"} == {
        k: v for k, v in before.json().items() if k != "decay_half_life_days"
    }

    # the origins allowed to call from a browser: one a line, as the API says them
    type_into(b, "textarea[name=cors_origins]", "HTTPS://App.Example\nhttp://localhost:5173")
    b.find(f"{PROJECT_FORM} button[type=submit]").click()
    b.until(lambda d: "Settings saved: cors_origins" in b.text("#status"), "origins saved")
    after = api_get(live, tenant, "/v1/settings").json()
    assert after["cors_origins"] == ["https://app.example", "http://localhost:5173"]

    # a value the API refuses: its reason beside the form, nothing changed
    type_into(b, "input[name='sessions.resume_chars']", "100")
    b.find(f"{PROJECT_FORM} button[type=submit]").click()
    b.until(lambda d: "resume_chars" in b.text("#settings-error"), "the refusal")
    b.errors()  # the browser logs the refused request, as it should
    assert api_get(live, tenant, "/v1/settings").json() == after

    # a read key: the same settings, read-only; no writing controls anywhere
    b.sign_in(reader_key(live, tenant))
    b.go("#/project")
    b.find("#settings-readonly")
    assert "admin key" in b.text("#settings-readonly")
    half_life = b.find("input[name=decay_half_life_days]")
    assert half_life.get_attribute("value") == "7"
    assert not half_life.is_enabled()
    assert b.find_all(f"{PROJECT_FORM} button") == []
    assert b.find_all(RULE_FORM) == []
    b.shot("project-read-only")
    b.go("#/notes")
    b.find(".count")
    assert b.find_all("#new-note") == []
    httpx.post(
        f"{live}/v1/notes", json={"id": "kept", "content": "Kept."}, headers=tenant.headers
    ).raise_for_status()
    b.go("#/note?id=kept")
    b.until(lambda d: b.text("h1.note-id") == "kept", "the note page")
    assert b.find_all("#edit") == [] and b.find_all("#delete-note") == []


async def test_tag_rules_singular_constrained_and_a_bad_regex(
    browser: Browser,  # noqa: F811
    live: str,  # noqa: F811
    tenant,
) -> None:
    b = browser
    b.sign_in(tenant.key)
    b.go("#/project")
    b.find(RULE_FORM)
    assert b.unlabelled() == []
    # a singular rule for "mood", written as the .tag/mood note's tags
    type_into(b, "input[name=rule-key]", "mood")
    type_into(b, "textarea[name=rule-description]", "How the writer felt.")
    b.find("input[name=rule-singular]").click()
    b.find(f"{RULE_FORM} button[type=submit]").click()
    b.until(lambda d: "mood" in rows(b, "#rules tbody tr"), "the new rule in the table")
    assert b.text('#rules tr[data-id="mood"] td.singular') == "yes"
    assert b.text('#rules tr[data-id="mood"] td.constrained') == NONE
    doc = api_get(live, tenant, "/v1/notes/.tag%2Fmood").json()
    assert doc["tags"]["_singular"] == "true" and doc["summary"] == "How the writer felt."
    rules = {r["key"]: r for r in api_get(live, tenant, "/v1/tag-rules").json()["rules"]}
    assert rules["mood"]["singular"] is True
    b.shot("tag-rule-singular")

    # through the API: a second value replaces the first
    httpx.post(
        f"{live}/v1/notes",
        json={"id": "diary", "content": "A day.", "tags": {"mood": "calm"}},
        headers=tenant.headers,
    ).raise_for_status()
    r = httpx.patch(
        f"{live}/v1/notes/diary/tags", json={"set": {"mood": "glad"}}, headers=tenant.headers
    )
    assert r.status_code == 200, r.text
    assert r.json()["tags"]["mood"] == "glad"

    # allowed values, then the rule made constrained through its Edit button
    for value in ("calm", "glad"):
        type_into(b, "input[name=value-key]", "mood")
        type_into(b, "input[name=value-name]", value)
        b.find("form[aria-label='Allow a value'] button[type=submit]").click()
        b.until(lambda d, v=value: f"Value {v} allowed" in b.text("#status"), "the value")
    assert api_get(live, tenant, "/v1/notes/.tag%2Fmood%2Fglad").status_code == 200
    b.find('button[aria-label="Edit rule mood"]').click()
    assert b.find("input[name=rule-key]").get_attribute("value") == "mood"
    assert b.find("input[name=rule-singular]").is_selected()
    b.find("input[name=rule-constrained]").click()
    b.find(f"{RULE_FORM} button[type=submit]").click()
    b.until(
        lambda d: b.text('#rules tr[data-id="mood"] td.constrained') == "calm, glad",
        "the allowed values",
    )
    r = httpx.patch(
        f"{live}/v1/notes/diary/tags", json={"set": {"mood": "angry"}}, headers=tenant.headers
    )
    assert r.status_code == 400 and "calm" in r.json()["error"], r.text
    b.shot("tag-rule-constrained")

    # a bad regex: the API's 400 message, and no rule stored
    type_into(b, "input[name=rule-key]", "code")
    b.find("input[name=rule-singular]").click()  # Edit left it checked
    b.find("input[name=rule-constrained]").click()
    type_into(b, "input[name=rule-regex]", "[unclosed")
    b.find(f"{RULE_FORM} button[type=submit]").click()
    b.until(lambda d: b.text("#rule-error"), "the refusal")
    b.errors()  # the browser logs the refused request, as it should
    assert api_get(live, tenant, "/v1/notes/.tag%2Fcode").status_code == 404
    r = httpx.post(
        f"{live}/v1/notes",
        json={"id": ".tag/code", "content": "Tag code.", "tags": {"_value_regex": "[unclosed"}},
        headers=tenant.headers,
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"] in b.text("#rule-error")
    assert "code" not in rows(b, "#rules tbody tr")
    b.shot("tag-rule-bad-regex")
