"""Tag rules from a project's ``.tag/<key>`` notes (app/notes/tag_policy.py):
``_singular``, ``_constrained``, ``_value_regex``, ``_requires`` and
``_inverse``, written by a write key and checked, and obeyed on every path
that writes tags (put, tag, batch, import, flows; keep's storage backend and
the property test over every path are in tests/test_tag_policy_paths.py).

The tests declare their own tag docs (keys keep does not ship), so they hold
whichever docs a project is seeded with."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from app.kit import tags as tagrules
from app.notes import tag_policy
from app.notes.repository import tagdocs
from tests.conftest import Tenant

# The rules every test here declares: keys keep's own docs do not use.
RULES: dict[str, dict[str, str]] = {
    ".tag/colour": {"_singular": "true"},
    ".tag/level": {"_constrained": "true"},
    ".tag/level/low": {},
    ".tag/level/high": {},
    ".tag/code": {"_value_regex": "[A-Z]{3}-[0-9]+"},
    ".tag/phase": {"_constrained": "true", "_singular": "true", "_requires": "track"},
    ".tag/phase/draft": {},
    ".tag/phase/done": {},
}
ALLOWED_LEVELS = {"low", "high"}
CODE = re.compile("[A-Z]{3}-[0-9]+")


def path(note_id: str) -> str:
    return "/v1/notes/" + quote(note_id, safe="")


async def declare(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    for note_id, tags in RULES.items():
        body = {"id": note_id, "content": f"The rules of {note_id}.", "tags": tags}
        r = await client.post("/v1/notes", json=body, headers=headers)
        assert r.status_code == 200, r.text


@pytest.fixture
async def ruled(client, tenant: Tenant) -> dict[str, str]:
    h = tenant.project("ruled")
    await declare(client, h)
    return h


async def put(
    client, h, note_id: str, tags: dict[str, Any], content: str = "text"
) -> httpx.Response:
    return await client.post(
        "/v1/notes", json={"id": note_id, "content": content, "tags": tags}, headers=h
    )


async def tag(client, h, note_id: str, **body: Any) -> httpx.Response:
    return await client.patch(path(note_id) + "/tags", json=body, headers=h)


async def tags_of(client, h, note_id: str) -> dict[str, Any]:
    r = await client.get(path(note_id), headers=h)
    assert r.status_code == 200, r.text
    return {k: v for k, v in r.json()["tags"].items() if not k.startswith("_")}


def refused(r: httpx.Response, *words: str) -> None:
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["code"] == "tag_rule", body
    for word in words:
        assert word in body["error"], body["error"]


# -- the rules, without a database ---------------------------------------------------------


def policy() -> tag_policy.Policy:
    return tag_policy.parse(RULES)


def test_the_docs_parse_into_rules() -> None:
    rules = policy().rules
    assert set(rules) == {"colour", "level", "code", "phase"}  # value notes declare no key
    assert rules["colour"].singular and not rules["colour"].constrained
    assert rules["level"].constrained and rules["level"].values == ("high", "low")
    assert rules["code"].value_regex == "[A-Z]{3}-[0-9]+"
    assert rules["phase"].requires == "track" and rules["phase"].singular
    bad = tag_policy.parse(
        {".tag/x": {"_constrained": "true", "_value_regex": "a"}, ".tag/y": {"_value_regex": "("}}
    ).rules
    assert "both" in (bad["x"].problem or "") and "not a regular expression" in (
        bad["y"].problem or ""
    )


def test_singular_takes_one_value_and_is_replaced() -> None:
    p = policy()
    assert tag_policy.check(p, adds={"colour": ["red"], "free": ["a", "b"]}, existing={}) == {
        "colour"
    }
    with pytest.raises(tag_policy.TagRuleBroken, match="singular"):
        tag_policy.check(p, adds={"colour": ["red", "blue"]}, existing={})


def test_constrained_values_name_the_allowed_ones() -> None:
    tag_policy.check(policy(), adds={"level": ["low", "high"]}, existing={})
    with pytest.raises(tag_policy.TagRuleBroken) as caught:
        tag_policy.check(policy(), adds={"level": ["mid"]}, existing={})
    assert "allowed: high, low" in caught.value.message and caught.value.status_code == 400
    with pytest.raises(tag_policy.TagRuleBroken):
        tag_policy.check(policy(), adds={"level": ["LOW"]}, existing={})  # values keep their case


def test_a_pattern_matches_the_whole_value() -> None:
    tag_policy.check(policy(), adds={"code": ["ABC-12"]}, existing={})
    for bad in ("ABC-12x", "xABC-12", "abc-12"):
        with pytest.raises(tag_policy.TagRuleBroken, match="does not match"):
            tag_policy.check(policy(), adds={"code": [bad]}, existing={})


def test_an_edge_tags_pattern_is_matched_against_the_note_it_names() -> None:
    p = tag_policy.parse({".tag/frame": {"_inverse": "frames", "_value_regex": r"^.+\?$"}})
    tag_policy.check(p, adds={"frame": ["[[why now?|the question]]"]}, existing={})
    with pytest.raises(tag_policy.TagRuleBroken, match="does not match"):
        tag_policy.check(p, adds={"frame": ["[[a statement|why?]]"]}, existing={})
    with pytest.raises(tag_policy.TagRuleBroken, match="names no note"):
        tag_policy.check(p, adds={"frame": [".tag/frame?"]}, existing={})


def test_requires_applies_the_constraint_only_beside_its_tag() -> None:
    p = policy()
    tag_policy.check(p, adds={"phase": ["gone"]}, existing={})
    with pytest.raises(tag_policy.TagRuleBroken):
        tag_policy.check(p, adds={"phase": ["gone"], "track": ["a"]}, existing={})
    with pytest.raises(tag_policy.TagRuleBroken):
        tag_policy.check(p, adds={"phase": ["gone"]}, existing={"track": "a"})
    with pytest.raises(tag_policy.TagRuleBroken, match="singular"):  # singular all the same
        tag_policy.check(p, adds={"phase": ["draft", "done"]}, existing={})


def test_an_empty_value_removes_without_a_check() -> None:
    deletes, adds = tagrules.user_tag_changes({"level": "", "code": ""})
    assert deletes == {"level", "code"} and adds == {}
    assert tag_policy.check(policy(), adds=adds, existing={"level": "mid"}) == set()


def test_a_doc_that_cannot_apply_refuses_its_key() -> None:
    p = tag_policy.parse({".tag/x": {"_constrained": "true", "_value_regex": "a"}})
    with pytest.raises(tag_policy.TagRuleBroken, match="fix that note first"):
        tag_policy.check(p, adds={"x": ["a"]}, existing={})


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"_value_regex": "[a-"}, "not a regular expression"),
        ({"_value_regex": "(?<=a)b"}, "lookarounds are not supported"),
        ({"_value_regex": r"(a)\1"}, "backreferences"),
        ({"_value_regex": "a" * 300}, "longer than"),
        ({"_constrained": "true", "_value_regex": "a"}, "both"),
        ({"_singular": "yes"}, '"true" or "false"'),
        ({"_constrained": ["true", "false"]}, "one value"),
        ({"_inverse": "not a key"}, "must name a tag key"),
        ({"_inverse": "_system"}, "user tag key"),
        ({"_requires": "9x"}, "must name a tag key"),
    ],
)
def test_flags_that_cannot_apply_are_refused(flags: dict[str, Any], message: str) -> None:
    with pytest.raises(tag_policy.TagRuleBroken, match=re.escape(message)):
        tag_policy.flag_changes(".tag/k", flags)


def test_a_pattern_that_backtracks_in_python_is_matched_in_linear_time() -> None:
    """RE2 runs the patterns a project writes: (a|a)*b and (a+)+$ would take
    Python's re for ever on these values (a write key could stall a server);
    here they answer at once."""
    p = tag_policy.parse(
        {".tag/x": {"_value_regex": "(a|a)*b"}, ".tag/y": {"_value_regex": "(a+)+$"}}
    )
    with pytest.raises(tag_policy.TagRuleBroken, match="does not match"):
        tag_policy.check(p, adds={"x": ["a" * 4000 + "c"]}, existing={})
    with pytest.raises(tag_policy.TagRuleBroken, match="does not match"):
        tag_policy.check(p, adds={"y": ["a" * 4000 + "!"]}, existing={})
    tag_policy.check(p, adds={"x": ["a" * 4000 + "b"], "y": ["aaaa"]}, existing={})


def test_flags_are_taken_only_on_a_tag_doc() -> None:
    changes = tag_policy.flag_changes(
        ".tag/k", {"_singular": True, "_inverse": "Pointed_By", "_requires": "", "_when": "x"}
    )
    assert changes.set == {"_singular": "true", "_inverse": "pointed_by"}
    assert changes.remove == {"_requires"}  # "" removes; _when is not a rule flag
    for other in ("note", ".tag/k/v", ".meta/todo", ".tag/Not Key"):
        assert not tag_policy.flag_changes(other, {"_singular": "true"})
    assert tag_policy.flag_changes(".tag/k", None, remove=["_singular", "topic"]).remove == {
        "_singular"
    }
    assert tag_policy.flag_changes(".tag/k", {"_value_regex": r"^.+\?$"})  # keep's own pattern


def test_a_record_is_checked_on_what_it_adds() -> None:
    p = policy()
    tag_policy.check_record(p, new={"level": ["low", "mid"]}, old={"level": ["low", "mid"]})
    tag_policy.check_record(p, new={"colour": "red", "_source": "x"}, old={"colour": "blue"})
    tag_policy.check_record(p, new={"level": ["mid", "high"]}, old={"level": "mid"})
    with pytest.raises(tag_policy.TagRuleBroken, match="constrained"):
        tag_policy.check_record(p, new={"level": ["mid", "bad"]}, old={"level": "mid"})
    with pytest.raises(tag_policy.TagRuleBroken, match="would hold 2"):
        tag_policy.check_record(p, new={"colour": ["red", "blue"]}, old={"colour": "red"})


# -- put, tag, batch, import, flows ----------------------------------------------------------


async def test_put_replaces_a_singular_tag_and_refuses_two_values(client, ruled) -> None:
    h = ruled
    assert (await put(client, h, "n", {"colour": "red", "topic": "a"})).status_code == 200
    r = await put(client, h, "n", {"colour": "blue", "topic": "b"}, content="new text")
    assert r.status_code == 200, r.text
    assert await tags_of(client, h, "n") == {"colour": "blue", "topic": ["a", "b"]}
    before = (await client.get(path("n"), headers=h)).json()
    refused(await put(client, h, "n", {"colour": ["red", "green"]}, content="x"), "singular")
    after = (await client.get(path("n"), headers=h)).json()
    assert after["summary"] == before["summary"] and after["tags"]["colour"] == "blue"
    refused(await put(client, h, "fresh", {"colour": ["red", "green"]}))
    assert (await client.get(path("fresh"), headers=h)).status_code == 404


async def test_tag_replaces_checks_and_removes(client, ruled) -> None:
    h = ruled
    await put(client, h, "n", {"colour": "red", "level": "low"})
    r = await tag(client, h, "n", set={"colour": "blue", "level": "high"})
    assert r.status_code == 200 and r.json()["changed"] is True
    assert await tags_of(client, h, "n") == {"colour": "blue", "level": ["low", "high"]}
    refused(await tag(client, h, "n", set={"level": "mid"}), "constrained", "allowed: high, low")
    refused(await tag(client, h, "n", set={"code": "abc-1"}), "does not match", "[A-Z]{3}-[0-9]+")
    assert await tags_of(client, h, "n") == {"colour": "blue", "level": ["low", "high"]}
    r = await tag(client, h, "n", set={"colour": "blue"})
    assert r.json()["changed"] is False  # the same single value: nothing to replace
    r = await tag(client, h, "n", set={"level": "", "code": "ABC-7"}, remove=["colour"])
    assert await tags_of(client, h, "n") == {"code": "ABC-7"}
    r = await tag(client, h, "n", remove_values={"code": "ABC-7"})
    assert await tags_of(client, h, "n") == {}


async def test_requires_counts_the_notes_tags_and_the_writes(client, ruled) -> None:
    h = ruled
    assert (await put(client, h, "loose", {"phase": "anything"})).status_code == 200
    refused(await put(client, h, "tracked", {"phase": "anything", "track": "t1"}), "phase")
    await put(client, h, "tracked", {"track": "t1"})
    refused(await tag(client, h, "tracked", set={"phase": "anything"}), "allowed: done, draft")
    assert (await tag(client, h, "tracked", set={"phase": "draft"})).status_code == 200
    assert (await tag(client, h, "tracked", set={"phase": "done"})).status_code == 200
    assert (await tags_of(client, h, "tracked"))["phase"] == "done"


async def test_a_batch_refuses_each_breaking_note_alone(client, ruled) -> None:
    h = ruled
    await put(client, h, "old", {"colour": "red"})
    notes = [
        {"id": "ok", "content": "fine", "tags": {"level": "low", "code": "XYZ-1"}},
        {"id": "bad-level", "content": "no", "tags": {"level": "mid"}},
        {"id": "old", "content": "changed", "tags": {"colour": "green"}},
        {"id": "old-bad", "content": "no", "tags": {"colour": ["a", "b"]}},
        {"id": "old", "content": "again", "tags": {"colour": ["a", "b"]}},
    ]
    r = await client.post("/v1/notes/batch", json={"notes": notes}, headers=h)
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["status"] for x in results] == [200, 400, 200, 400, 400]
    assert {x["code"] for x in results if x["status"] == 400} == {"tag_rule"}
    assert "allowed: high, low" in results[1]["error"]
    assert await tags_of(client, h, "old") == {"colour": "green"}
    assert (await client.get(path("bad-level"), headers=h)).status_code == 404
    assert (await client.get(path("old-bad"), headers=h)).status_code == 404


async def test_an_import_obeys_the_rules_its_own_tag_docs_declare(client, tenant) -> None:
    h = tenant.project("imported")
    docs = [
        {"id": "uses", "summary": "a note", "tags": {"grade": "b", "shade": "dark"}},
        {"id": ".tag/grade", "summary": "grades", "tags": {"_constrained": "true"}},
        {"id": ".tag/grade/a", "summary": "top"},
        {"id": ".tag/grade/b", "summary": "fine"},
        {"id": ".tag/shade", "summary": "one shade", "tags": {"_singular": "true"}},
    ]
    r = await client.post("/v1/import", json={"documents": docs}, headers=h)
    assert r.status_code == 200 and r.json()["imported"] == 5, r.text
    assert (await client.get(path(".tag/grade"), headers=h)).json()["tags"][
        "_constrained"
    ] == "true"
    bad = [{"id": "other", "summary": "x", "tags": {"grade": "z"}}]
    refused(await client.post("/v1/import", json={"documents": bad}, headers=h), "allowed: a, b")
    bad = [{"id": "other", "summary": "x", "tags": {"shade": ["dark", "light"]}}]
    refused(await client.post("/v1/import", json={"documents": bad}, headers=h), "singular")
    bad = [{"id": ".tag/broken", "summary": "x", "tags": {"_value_regex": "(x"}}]
    refused(await client.post("/v1/import", json={"documents": bad}, headers=h), "regular")
    assert (await client.get(path("other"), headers=h)).status_code == 404  # all rolled back


async def _flow(client, h, state: str, params: dict[str, Any]) -> dict[str, Any]:
    r = await client.post("/v1/flow", json={"state": state, "params": params}, headers=h)
    assert r.status_code == 200, r.text
    return dict(r.json())


def flow_refused(answer: dict[str, Any]) -> bool:
    """A flow reports a refused write in its answer (``status: "error"``, or
    the state doc's binding of the action's error, as keep's flows do)."""
    assert answer["status"] in ("done", "error"), answer
    return '"code": "tag_rule"' in json.dumps(answer["data"])


async def test_flows_write_through_the_rules(client, ruled) -> None:
    h = ruled
    done = await _flow(client, h, "put", {"id": "f", "content": "x", "tags": {"colour": "red"}})
    assert done["status"] == "done", done
    done = await _flow(client, h, "tag", {"id": "f", "tags": {"colour": "blue"}})
    assert done["status"] == "done", done
    assert await tags_of(client, h, "f") == {"colour": "blue"}
    for state, params in (
        ("put", {"id": "f", "content": "y", "tags": {"level": "mid"}}),
        ("tag", {"id": "f", "tags": {"code": "nope"}}),
        ("tag", {"id": "f", "tags": {"colour": ["a", "b"]}}),
    ):
        assert flow_refused(await _flow(client, h, state, params)), (state, params)
    assert await tags_of(client, h, "f") == {"colour": "blue"}


# -- the rule flags on .tag/* notes ----------------------------------------------------------


async def test_a_write_key_sets_and_removes_the_flags(client, tenant) -> None:
    h = tenant.project("flags")
    r = await put(client, h, ".tag/mood", {"_singular": "true", "_when": "x", "topic": "m"})
    assert r.status_code == 200, r.text
    made = r.json()["tags"]
    assert made["_singular"] == "true" and "_when" not in made and made["topic"] == "m"
    # a new text keeps the rules; a tag adds one
    await put(client, h, ".tag/mood", {}, content="Mood: one at a time.")
    r = await tag(client, h, ".tag/mood", set={"_requires": "Person"})
    assert r.json()["tags"]["_requires"] == "person" and r.json()["tags"]["_singular"] == "true"
    r = await tag(client, h, ".tag/mood", set={"_singular": ""}, remove=["_requires"])
    assert "_singular" not in r.json()["tags"] and "_requires" not in r.json()["tags"]
    r = await put(client, h, ".tag/mood", {"_singular": "false"})
    assert r.json()["tags"]["_singular"] == "false"
    # flags anywhere else stay stripped
    r = await put(client, h, "plain", {"_singular": "true", "_inverse": "x"})
    assert not {"_singular", "_inverse"} & set(r.json()["tags"])
    r = await put(client, h, ".tag/mood/happy", {"_constrained": "true"})
    assert "_constrained" not in r.json()["tags"]


async def test_flags_that_cannot_apply_are_a_400(client, tenant) -> None:
    h = tenant.project("badflags")
    refused(await put(client, h, ".tag/x", {"_value_regex": "[unclosed"}), "regular expression")
    refused(await put(client, h, ".tag/x", {"_singular": "1"}), '"true" or "false"')
    refused(await put(client, h, ".tag/x", {"_inverse": "two words"}), "tag key")
    refused(await put(client, h, ".tag/x", {"_constrained": "true", "_value_regex": "a"}), "both")
    assert (await client.get(path(".tag/x"), headers=h)).status_code == 404
    await put(client, h, ".tag/x", {"_constrained": "true"})
    refused(
        await tag(client, h, ".tag/x", set={"_value_regex": "a+"}), "both"
    )  # with what is stored
    refused(await put(client, h, ".tag/x", {"_value_regex": "a+"}, content="new"), "both")
    r = await tag(client, h, ".tag/x", set={"_constrained": "", "_value_regex": "a+"})
    assert r.status_code == 200 and r.json()["tags"]["_value_regex"] == "a+"


async def test_edits_of_the_rules_hold_for_the_next_write(client, tenant, monkeypatch) -> None:
    h = tenant.project("edits")
    reads: list[str] = []
    real = tagdocs.tag_docs

    async def counted(session, scope):
        reads.append(scope.project_slug)
        return await real(session, scope)

    monkeypatch.setattr(tagdocs, "tag_docs", counted)
    monkeypatch.setattr(tag_policy._cache, "ttl", None)  # only writes drop the rules here
    await put(client, h, "n", {"colour": "red"})
    await put(client, h, "n", {"colour": "blue"})
    assert await tags_of(client, h, "n") == {"colour": ["red", "blue"]}  # no rule yet
    await put(client, h, ".tag/colour", {"_singular": "true"})
    await put(client, h, "n", {"colour": "green"}, content="later")
    assert await tags_of(client, h, "n") == {"colour": "green"}
    await put(client, h, "untagged", {})
    await put(client, h, "n", {"colour": "pink"})
    assert len(reads) == 2  # once, and once after the edit; never for a write without tags
    await tag(client, h, ".tag/colour", remove=["_singular"])
    await tag(client, h, "n", set={"colour": "red"})
    assert await tags_of(client, h, "n") == {"colour": ["pink", "red"]}
    await put(client, h, ".tag/level", {"_constrained": "true"})
    refused(await tag(client, h, "n", set={"level": "mid"}), "none yet")
    await put(client, h, ".tag/level/mid", {})
    assert (await tag(client, h, "n", set={"level": "mid"})).status_code == 200
    assert (await client.delete(path(".tag/level/mid"), headers=h)).status_code == 200
    refused(await put(client, h, "m", {"level": "mid"}), "none yet")


async def test_the_rules_are_listed(client, ruled, tenant) -> None:
    r = await client.get("/v1/tag-rules", headers=ruled)
    assert r.status_code == 200, r.text
    rules = {rule["key"]: rule for rule in r.json()["rules"]}
    assert rules["level"] == {
        "key": "level", "singular": False, "constrained": True, "values": ["high", "low"],
        "value_regex": None, "inverse": None, "requires": None, "problem": None,
    }  # fmt: skip
    assert rules["phase"]["requires"] == "track" and rules["phase"]["singular"] is True
    assert rules["code"]["value_regex"] == "[A-Z]{3}-[0-9]+" and rules["colour"]["values"] == []
    made = await client.post(
        "/v1/keys", json={"name": "r", "scopes": ["read"]}, headers=tenant.headers
    )
    reader = {"Authorization": f"Bearer {made.json()['key']}", "X-Project": "ruled"}
    assert (await client.get("/v1/tag-rules", headers=reader)).status_code == 200
    assert (await client.get("/v1/tag-rules")).status_code == 401


async def test_a_declared_edge_tag_makes_edges_and_stubs(client, tenant) -> None:
    h = tenant.project("edges")
    await put(client, h, ".tag/mentor", {"_inverse": "mentee_of", "_value_regex": "person/.+"})
    assert (await put(client, h, "lesson", {"mentor": "[[person/ada|Ada]]"})).status_code == 200
    stub = await client.get(path("person/ada"), headers=h)
    assert stub.status_code == 200 and stub.json()["tags"]["_source"] == "auto-vivify"
    refused(await put(client, h, "other", {"mentor": "[[ada]]"}), "person/.+")
    rules = (await client.get("/v1/tag-rules", headers=h)).json()["rules"]
    assert [r["inverse"] for r in rules if r["key"] == "mentor"] == ["mentee_of"]
