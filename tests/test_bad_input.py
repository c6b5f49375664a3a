"""Bad input never gives a 5xx: each case is a 4xx in the one error shape,
and nothing it carried is stored.

The table holds what an outside probe found answering 500, plus neighbours
of each (other fields, other routes) so a fix has to be at the root.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from app import tenancy

NUL = "a\x00b"
SURROGATE = "x\ud800y"
BIG = "9223372036854775808"  # 2**63: one past int64
HUGE = "1" + "0" * 40


@dataclass(frozen=True)
class Raw:
    """A body sent as this JSON text (json.dumps cannot write 20,000 levels)."""

    text: str


@dataclass(frozen=True)
class Multipart:
    """A multipart/form-data body: form fields and one small file."""

    fields: dict[str, str]


def nested(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


# (method, path, json body (or Raw, Multipart) or None, query params or None)
Case = tuple[str, str, Any, dict[str, str] | None]

CASES: dict[str, Case] = {
    # NUL in every free-text field
    "nul content": ("POST", "/v1/notes", {"content": NUL}, None),
    "nul summary": ("POST", "/v1/notes", {"content": "x", "summary": NUL}, None),
    "nul tag value": ("POST", "/v1/notes", {"content": "x", "tags": {"k": NUL}}, None),
    "nul tag key": ("POST", "/v1/notes", {"content": "x", "tags": {NUL: "v"}}, None),
    "nul tag list value": ("POST", "/v1/notes", {"content": "x", "tags": {"k": ["a", NUL]}}, None),
    "nul created_at": ("POST", "/v1/notes", {"content": "x", "created_at": NUL}, None),
    "nul uri": ("POST", "/v1/notes", {"uri": "https://example.com/" + NUL}, None),
    "nul id": ("POST", "/v1/notes", {"content": "x", "id": NUL}, None),
    "nul tag patch": ("PATCH", "/v1/notes/n1/tags", {"set": {"k": NUL}}, None),
    "nul remove": ("PATCH", "/v1/notes/n1/tags", {"remove": [NUL]}, None),
    "nul task content": ("POST", "/v1/tasks", {"task_type": "summarize", "content": NUL}, None),
    "nul task metadata": (
        "POST",
        "/v1/tasks",
        {"task_type": "summarize", "content": "x", "metadata": {"a": NUL}},
        None,
    ),
    "nul key name": ("POST", "/v1/keys", {"name": NUL, "scopes": ["read"]}, None),
    "nul search query": ("POST", "/v1/search", {"query": NUL}, None),
    "nul search scope": ("POST", "/v1/search", {"query": "x", "scope": NUL}, None),
    "nul search since": ("POST", "/v1/search", {"query": "x", "since": NUL}, None),
    "nul compact query": ("POST", "/v1/search/compact", {"query": NUL}, None),
    "nul move name": ("POST", "/v1/move", {"name": NUL}, None),
    "nul analyze": ("POST", "/v1/notes/n1/analyze", {"content": NUL}, None),
    "nul list prefix": ("GET", "/v1/notes", None, {"prefix": NUL}),
    "nul list tag": ("GET", "/v1/notes", None, {"tag": "k=" + NUL}),
    "nul list since": ("GET", "/v1/notes", None, {"since": NUL}),
    "nul jobs note": ("GET", "/v1/jobs", None, {"note_id": NUL}),
    "nul entity name": ("GET", "/v1/entities", None, {"name": NUL}),
    "nul entity kind": ("GET", "/v1/entities", None, {"kind": NUL}),
    "nul entity key": ("GET", "/v1/entities/person%3Aa%00b/notes", None, None),
    "nul walk note": ("GET", "/v1/graph/walk", None, {"note": NUL}),
    "nul walk entity": ("GET", "/v1/graph/walk", None, {"entity": NUL}),
    "nul note path": ("GET", "/v1/notes/a%00b", None, None),
    # lone surrogates
    "surrogate content": ("POST", "/v1/notes", {"content": SURROGATE}, None),
    "surrogate query": ("POST", "/v1/search", {"query": SURROGATE}, None),
    "surrogate tag": ("POST", "/v1/notes", {"content": "x", "tags": {"k": SURROGATE}}, None),
    "low surrogate": ("POST", "/v1/notes", {"content": "x\udc00"}, None),
    # integers past int64, and digits that are not ASCII
    "job id > int64": ("GET", f"/v1/jobs/{BIG}", None, None),
    "job retry > int64": ("POST", f"/v1/jobs/{BIG}/retry", None, None),
    "jobs before > int64": ("GET", "/v1/jobs", None, {"before": BIG}),
    "list offset > int64": ("GET", "/v1/notes", None, {"offset": BIG}),
    "list limit huge": ("GET", "/v1/notes", None, {"limit": HUGE}),
    "versions offset > int64": ("GET", "/v1/notes/n1/versions", None, {"offset": BIG}),
    "timeline budget > int64": ("GET", "/v1/notes/n1/timeline", None, {"token_budget": BIG}),
    "detail budget > int64": ("GET", "/v1/notes/n1/detail", None, {"token_budget": BIG}),
    "task id > int64": ("GET", f"/v1/tasks/{BIG}", None, None),
    "task delete > int64": ("DELETE", f"/v1/tasks/{BIG}", None, None),
    "version > int64": ("GET", "/v1/notes/n1@V{99999999999999999999}", None, None),
    "part > int64": ("GET", "/v1/notes/n1@P{99999999999999999999}", None, None),
    "version unicode digit": ("GET", "/v1/notes/n1@V{%C2%B2}", None, None),
    "task id unicode digit": ("GET", "/v1/tasks/%C2%B2", None, None),
    "compact budget > int64": (
        "POST",
        "/v1/search/compact",
        {"query": "x", "token_budget": 2**64},
        None,
    ),
    "search limit 1e400": ("POST", "/v1/search", {"query": "x", "limit": 1e400}, None),
    "search limit huge int": ("POST", "/v1/search", {"query": "x", "limit": 10**40}, None),
    "half life 1e400": ("POST", "/v1/search", {"query": "x", "half_life_days": 1e400}, None),
    "bias 1e400": ("POST", "/v1/search", {"query": "x", "bias": {"a": 1e400}}, None),
    "tag value 1e400": ("POST", "/v1/notes", {"content": "x", "tags": {"k": 1e400}}, None),
    # cursors: opaque ids, so any malformed one is a 400 invalid_cursor (a
    # 20-digit export cursor overflowed bigint: a 500)
    "cursor changes > int64": ("GET", "/v1/export/changes", None, {"cursor": "9" * 20}),
    "cursor changes int64 + 1": ("GET", "/v1/export/changes", None, {"cursor": BIG}),
    "cursor changes huge": ("GET", "/v1/export/changes", None, {"cursor": HUGE}),
    "cursor changes negative": ("GET", "/v1/export/changes", None, {"cursor": "-1"}),
    "cursor changes unicode digit": ("GET", "/v1/export/changes", None, {"cursor": "\u00b2"}),
    "cursor changes long": ("GET", "/v1/export/changes", None, {"cursor": "x" * 5000}),
    "cursor changes empty": ("GET", "/v1/export/changes", None, {"cursor": ""}),
    "cursor changes braced uuid": (
        "GET",
        "/v1/export/changes",
        None,
        {"cursor": "{12345678-1234-4234-8234-123456789abc}"},
    ),
    "cursor audit > int64": ("GET", "/v1/audit", None, {"cursor": "9" * 20}),
    "cursor audit decimal": ("GET", "/v1/audit", None, {"cursor": "1.5"}),
    "cursor audit empty": ("GET", "/v1/audit", None, {"cursor": ""}),
    "cursor events > int64": ("GET", "/v1/events", None, {"after": "9" * 20}),
    "cursor events negative": ("GET", "/v1/events", None, {"after": "-1"}),
    # durations and dates out of range
    "since P1000000D": ("GET", "/v1/notes", None, {"since": "P1000000D"}),
    "until PT99999999999999H": ("GET", "/v1/notes", None, {"until": "PT99999999999999H"}),
    "search since huge": (
        "POST",
        "/v1/search",
        {"query": "x", "since": "P99999999999999999999Y"},
        None,
    ),
    "created_at year 1": ("POST", "/v1/notes", {"content": "x", "created_at": "0001-01-01"}, None),
    # a glob range PostgreSQL's regex engine refuses
    "prefix range reversed": ("GET", "/v1/notes", None, {"prefix": "[z-a]*"}),
    # sizes
    "query too long": ("POST", "/v1/search", {"query": "word " * 40_000}, None),
    "uri broken ipv6": ("POST", "/v1/notes", {"uri": "http://[::1/"}, None),
    "uri bad port": ("POST", "/v1/notes", {"uri": "http://example.com:99999/"}, None),
    # webhook URLs the one URL parser refuses (each was a 500)
    "webhook url bad port": ("POST", "/v1/webhooks", {"url": "http://example.com:99999/"}, None),
    "webhook url broken ipv6": ("POST", "/v1/webhooks", {"url": "http://[::1/"}, None),
    "webhook url empty labels": ("POST", "/v1/webhooks", {"url": "http://.../"}, None),
    "webhook url control char": ("POST", "/v1/webhooks", {"url": "http://exa\x85mple.com/"}, None),
    "webhook url nul": ("POST", "/v1/webhooks", {"url": "http://example.com/" + NUL}, None),
    "deep json": ("POST", "/v1/notes", {"content": "x", "tags": {"k": [[[[[[[]]]]]]]}}, None),
    # JSON deeper than the one decoder allows (64 levels), on every kind of
    # input: bodies, an upload's JSON form field (5,000 levels of tags were
    # a RecursionError, a 500), an import
    "deep json body": (
        "POST",
        "/v1/notes",
        Raw(f'{{"content": "x", "tags": {nested(100)}}}'),
        None,
    ),
    "deep json 20000": ("POST", "/v1/notes", Raw(nested(20_000)), None),
    "deep json search": (
        "POST",
        "/v1/search",
        Raw(f'{{"query": "x", "bias": {nested(70)}}}'),
        None,
    ),
    "deep json import": (
        "POST",
        "/v1/import",
        Raw(f'{{"documents": [{{"id": "d", "summary": "s", "parts": {nested(5000)}}}]}}'),
        None,
    ),
    "deep json upload tags": ("POST", "/v1/upload", Multipart({"tags": nested(5000)}), None),
    "deep json upload tags 70": (
        "POST",
        "/v1/upload",
        Multipart({"tags": f'{{"k": {nested(70)}}}'}),
        None,
    ),
    "nan upload tags": ("POST", "/v1/upload", Multipart({"tags": '{"k": NaN}'}), None),
    # import: version and part numbers (part -1 was stored, and unreadable);
    # the valid first document is not stored either (the import is refused whole)
    **{
        f"import {name}": (
            "POST",
            "/v1/import",
            {"documents": [{"id": "fine", "summary": "s"}, {"id": "bad", "summary": "s", **doc}]},
            None,
        )
        for name, doc in {
            "part_num -1": {"parts": [{"part_num": -1, "summary": "p"}]},
            "part_num 0": {"parts": [{"part_num": 0, "summary": "p"}]},
            "part_num > int32": {"parts": [{"part_num": 2**31, "summary": "p"}]},
            "part_num > int64": {"parts": [{"part_num": 2**64, "summary": "p"}]},
            "part_num text": {"parts": [{"part_num": "2", "summary": "p"}]},
            "part_num true": {"parts": [{"part_num": True, "summary": "p"}]},
            "part_num 1.5": {"parts": [{"part_num": 1.5, "summary": "p"}]},
            "part_num twice": {"parts": [{"part_num": 2}, {"part_num": 2}]},
            "parts not a list": {"parts": {"part_num": 1}},
            "part not an object": {"parts": ["p"]},
            "version -1": {"versions": [{"version": -1, "summary": "v"}]},
            "version text": {"versions": [{"version": "x", "summary": "v"}]},
            "version object": {"versions": [{"version": {}, "summary": "v"}]},
            "version > int32": {"versions": [{"version": 2**31, "summary": "v"}]},
            "version twice": {"versions": [{"version": 1}, {"version": 1}]},
        }.items()
    },
}


async def _stored_rows(db, tenant) -> int:
    from sqlalchemy import text

    async with tenancy.tenant_id_transaction(db, tenant.id) as session:
        notes = await session.scalar(
            text("SELECT count(*) FROM notes WHERE tenant_id = :t AND id NOT LIKE '.%'"),
            {"t": tenant.id},
        )
        jobs = await session.scalar(
            text("SELECT count(*) FROM jobs WHERE tenant_id = :t AND kind = 'task'"),
            {"t": tenant.id},
        )
        keys = await session.scalar(
            text("SELECT count(*) FROM api_keys WHERE tenant_id = :t"), {"t": tenant.id}
        )
        hooks = await session.scalar(
            text("SELECT count(*) FROM webhooks WHERE tenant_id = :t"), {"t": tenant.id}
        )
    return int(notes) + int(jobs) + int(keys) + int(hooks)


@pytest.mark.parametrize("name", list(CASES))
async def test_bad_input_is_a_clean_4xx(name: str, client, make_tenant, db) -> None:
    tenant = await make_tenant()
    method, path, body, params = CASES[name]
    before = await _stored_rows(db, tenant)
    if body is None:
        r = await client.request(method, path, params=params, headers=tenant.headers)
    elif isinstance(body, Multipart):
        r = await client.request(
            method,
            path,
            params=params,
            data=body.fields,
            files={"file": ("note.txt", b"a small document", "text/plain")},
            headers=tenant.headers,
        )
    else:
        import json

        raw = body.text if isinstance(body, Raw) else json.dumps(body, allow_nan=True)
        if "1e400" in name:  # 1e400 travels as the literal Infinity
            raw = raw.replace("Infinity", "1e400")
        r = await client.request(
            method,
            path,
            params=params,
            content=raw.encode("utf-8", "surrogatepass"),
            headers={**tenant.headers, "content-type": "application/json"},
        )
    assert 400 <= r.status_code < 500, (name, r.status_code, r.text[:300])
    data = r.json()
    assert {"error", "code", "request_id"} <= set(data), data
    assert data["error"] and data["code"] and data["request_id"] == r.headers["x-request-id"]
    assert await _stored_rows(db, tenant) == before, name


@pytest.mark.parametrize("name", [n for n in CASES if n.startswith("cursor ")])
async def test_a_malformed_cursor_is_a_400_naming_it(name: str, client, tenant) -> None:
    """Not any 4xx: a cursor is opaque text, so no schema rule can refuse it
    first (a 422); the service's parser answers 400 ``invalid_cursor``."""
    method, path, _, params = CASES[name]
    r = await client.request(method, path, params=params, headers=tenant.headers)
    assert r.status_code == 400, (name, r.text[:300])
    assert r.json()["code"] == "invalid_cursor"
    assert next(iter(params or {})) in r.json()["error"]


async def test_json_literals_nan_and_infinity_are_refused(client, tenant) -> None:
    for literal in ("NaN", "Infinity", "-Infinity"):
        r = await client.post(
            "/v1/search",
            content=f'{{"query": "x", "half_life_days": {literal}}}'.encode(),
            headers={**tenant.headers, "content-type": "application/json"},
        )
        assert r.status_code == 400, literal
        assert r.json()["code"] == "invalid_input"
        assert literal in r.json()["error"]


async def test_json_nested_too_deeply_is_refused_with_a_message(client, tenant) -> None:
    """The one decoder's limit, named in the 400, for a body and a form field."""
    r = await client.post(
        "/v1/notes",
        content=nested(20_000).encode(),
        headers={**tenant.headers, "content-type": "application/json"},
    )
    assert r.status_code == 400 and r.json()["code"] == "invalid_input"
    assert "nested too deeply (at most 64 levels" in r.json()["error"]
    r = await client.post(
        "/v1/upload",
        data={"tags": nested(5000)},
        files={"file": ("n.txt", b"text", "text/plain")},
        headers=tenant.headers,
    )
    assert r.status_code == 400 and r.json()["error"].startswith("tags: JSON is nested too")


def test_the_decoder_allows_64_levels_and_no_more() -> None:
    from app.kit import storable

    assert storable.loads(nested(63, "[]")) is not None
    with pytest.raises(storable.InputRefused, match="nested too deeply"):
        storable.loads(nested(64, "[]"))
    with pytest.raises(storable.InputRefused, match="nested too deeply"):
        storable.loads(nested(64, "{}"))
    assert storable.loads('{"a": ' * 64 + "1" + "}" * 64) is not None


async def test_valid_text_still_works(client, tenant) -> None:
    """The checks refuse only what cannot be stored: astral characters (a
    valid surrogate pair in JSON), control characters other than NUL, and
    big-but-valid numbers pass."""
    r = await client.post(
        "/v1/notes",
        content=b'{"id": "emoji", "content": "smile \\ud83d\\ude00 tab\\tend", '
        b'"tags": {"n": 9223372036854775807}}',
        headers={**tenant.headers, "content-type": "application/json"},
    )
    assert r.status_code == 200, r.text
    got = (await client.get("/v1/notes/emoji", headers=tenant.headers)).json()
    assert "\U0001f600" in got["summary"]


async def test_glob_brackets_are_literal_characters(client, tenant) -> None:
    """Inside ``[...]`` only ranges are syntax: POSIX classes, back references
    and escapes reach the regex engine as plain characters."""
    for note_id in ("alpha", ":]z", "[1]"):
        await client.post(
            "/v1/notes", json={"id": note_id, "content": note_id}, headers=tenant.headers
        )

    async def listed(prefix: str) -> list[str]:
        r = await client.get("/v1/notes", params={"prefix": prefix}, headers=tenant.headers)
        assert r.status_code == 200, r.text
        return sorted(n["id"] for n in r.json()["notes"])

    assert await listed("[[:alpha:]]*") == [":]z"]  # one of "[:alph", then "]"
    assert await listed("[[:nope:]]*") == [":]z"]
    assert await listed("[a-b]lpha") == ["alpha"]
    assert await listed("[\\1]*") == []
    assert await listed("[!a]*") == [":]z", "[1]"]
    r = await client.post(
        "/v1/search", json={"query": "x", "scope": "[[:alpha:]]"}, headers=tenant.headers
    )
    assert r.status_code == 200, r.text


async def test_longest_allowed_question_is_answered(client, tenant) -> None:
    """At the 10,000-character cap a question of ~1,700 distinct words is still
    an ordinary find (before the cap, 200,000 words ran 22 s and then hit
    PostgreSQL's stack depth limit)."""
    await client.post("/v1/notes", json={"content": "word17 and more"}, headers=tenant.headers)
    question = " ".join(f"word{i}" for i in range(1700))[:10_000]
    for stages in ("hybrid", "text"):
        r = await client.post(
            "/v1/search", json={"query": question, "stages": stages}, headers=tenant.headers
        )
        assert r.status_code == 200, r.text
    r = await client.post("/v1/search", json={"query": "x" * 10_001}, headers=tenant.headers)
    assert r.status_code == 422 and "10000" in r.text
