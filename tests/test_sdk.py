"""keepmem-client against the real app: in process (ASGI transport) and over
HTTP (a live server), so the API and the SDK cannot drift; retries and error
mapping with a transport that answers chosen failures."""

from __future__ import annotations

import hashlib

import httpx
import pytest
from keepmem_client import (
    APIConnectionError,
    APITimeoutError,
    AsyncKeepmem,
    AuthenticationError,
    BadRequestError,
    Keepmem,
    NotFoundError,
    RateLimitError,
    ServiceUnavailableError,
    ValidationError,
)


@pytest.fixture
async def km(client, asgi_app, tenant):
    transport = httpx.ASGITransport(app=asgi_app)
    async with AsyncKeepmem("http://keepmem.test", tenant.key, transport=transport) as sdk:
        yield sdk


async def test_async_sdk_round_trip(km) -> None:
    note = await km.put("OAuth2 uses PKCE for public clients", id="auth", tags={"topic": "auth"})
    assert note.id == "auth" and note.tags["topic"] == "auth" and note.changed
    await km.put("Use PKCE with S256 for every client", id="auth")
    assert (await km.get("auth")).summary == "Use PKCE with S256 for every client"
    assert (await km.get("auth@V{1}")).summary.startswith("OAuth2")
    found = await km.find("PKCE", stages="text", half_life_days=0)
    assert found.notes[0].id == "auth" and found.mode == "text"
    compact = await km.find_compact("PKCE", stages="text", token_budget=50)
    assert compact.results[0].id == "auth"
    tagged = await km.tag("auth", {"status": "open"})
    assert tagged.tags["status"] == "open"
    versions = await km.versions("auth")
    assert versions.count == 1 and versions.versions[0].offset == 1
    batch = await km.put_many([{"content": f"turn {i}", "id": f"t{i}"} for i in range(7)])
    assert batch.stored == 7 and batch.failed == 0
    ids = [n.id async for n in km.list(page_size=3, prefix="t")]
    assert sorted(ids) == [f"t{i}" for i in range(7)]  # three pages
    await km.now("working on the SDK")
    assert (await km.now()).summary == "working on the SDK"
    moved = await km.move("sdk-archive", source="now")
    assert moved.id == "sdk-archive"
    exported = [d async for d in km.export()]
    assert exported[0]["format"] == "keep-export"
    assert {"auth", "t0"} <= {d["id"] for d in exported[1:]}
    done = await km.import_([{"id": "imp", "summary": "imported"}])
    assert done.imported == 1
    body = b"# Title\n\nBody text."
    uploaded = await km.upload(body, filename="doc.md")
    assert uploaded.id == "%" + hashlib.sha256(body).hexdigest()[:12]  # named by content
    assert uploaded.tags["filename"] == "doc.md"
    jobs = await km.jobs(kind="embed")
    assert jobs.jobs and all(j.kind == "embed" for j in jobs.jobs)
    gone = await km.delete("auth")
    assert gone.deleted == "auth"
    assert (await km.health())["status"] == "ok"


async def test_async_sdk_errors_carry_status_code_and_request_id(km, asgi_app) -> None:
    with pytest.raises(NotFoundError) as missing:
        await km.get("no-such-note")
    assert missing.value.status == 404 and missing.value.code == "note_not_found"
    assert missing.value.request_id
    with pytest.raises(BadRequestError) as bad:
        await km.put("x", id="bad;id")
    assert "invalid" in bad.value.message
    with pytest.raises(ValidationError):
        await km.find("x", limit=1000)
    transport = httpx.ASGITransport(app=asgi_app)
    bad_key = "km_nope_" + "x" * 30
    async with AsyncKeepmem("http://keepmem.test", bad_key, transport=transport) as k:
        with pytest.raises(AuthenticationError) as denied:
            await k.get("auth")
    assert denied.value.status == 401


def test_sync_sdk_over_http(live_url, tenant) -> None:
    with Keepmem(live_url, tenant.key, project="sync") as km:
        km.put("The harbour at dawn", id="harbour", tags={"place": "sea"})
        km.put_many([{"content": f"boat {i}", "tags": {"place": "sea"}} for i in range(5)])
        listed = list(km.list(tags={"place": "sea"}, page_size=2))
        assert len(listed) == 6
        assert km.get("harbour").tags["place"] == "sea"
        header, *docs = list(km.export())
        assert header["store_info"]["document_count"] == len(docs) == 6
        with pytest.raises(NotFoundError):
            km.get("nope")


def test_configuration_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("KEEPMEM_URL", "http://example.test:9999/")
    monkeypatch.setenv("KEEPMEM_API_KEY", "km_env_key")
    monkeypatch.setenv("KEEPMEM_PROJECT", "envproj")
    with Keepmem() as km:
        assert km.config.base_url == "http://example.test:9999"
        headers = km.config.default_headers()
        assert headers["Authorization"] == "Bearer km_env_key"
        assert headers["X-Project"] == "envproj"
    with Keepmem("http://other.test", "km_arg", project="p2") as km:
        assert km.config.base_url == "http://other.test"
        assert km.config.default_headers()["X-Project"] == "p2"


# -- retries and error mapping with chosen failures -----------------------------------


class Script:
    """A transport answering from a script; counts what it was sent."""

    def __init__(self, *answers: httpx.Response | Exception) -> None:
        self.answers = list(answers)
        self.seen: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(f"{request.method} {request.url.path}")
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def _err(status: int, code: str, **headers: str) -> httpx.Response:
    body = {"error": code.replace("_", " "), "code": code, "request_id": "rid-1"}
    return httpx.Response(status, json=body, headers=headers)


NOTE = {"id": "n", "summary": "s", "tags": {}}


def _sdk(script: Script, retries: int = 2) -> Keepmem:
    return Keepmem("http://t", "k", max_retries=retries, transport=httpx.MockTransport(script))


def test_reads_are_retried_on_5xx_429_and_connection_errors(monkeypatch) -> None:
    monkeypatch.setattr("keepmem_client._base.random.random", lambda: 0.0)
    monkeypatch.setattr("time.sleep", lambda s: None)
    script = Script(
        _err(503, "database_unavailable"),
        _err(429, "rate_limited", **{"Retry-After": "0"}),
        httpx.Response(200, json=NOTE),
    )
    with _sdk(script) as km:
        assert km.get("n").id == "n"
    assert len(script.seen) == 3
    script = Script(httpx.ConnectError("refused"), httpx.Response(200, json=NOTE))
    with _sdk(script) as km:
        assert km.get("n").id == "n"
    script = Script(*[_err(503, "database_unavailable")] * 3)
    with _sdk(script) as km, pytest.raises(ServiceUnavailableError) as failed:
        km.get("n")
    assert failed.value.code == "database_unavailable" and failed.value.request_id == "rid-1"
    assert len(script.seen) == 3  # the first try and two retries


def test_writes_are_never_repeated(monkeypatch) -> None:
    monkeypatch.setattr("time.sleep", lambda s: None)
    script = Script(_err(503, "provider_unavailable"), httpx.Response(200, json=NOTE))
    with _sdk(script) as km, pytest.raises(ServiceUnavailableError):
        km.put("x")
    assert script.seen == ["POST /v1/notes"]
    script = Script(_err(429, "rate_limited", **{"Retry-After": "7"}))
    with _sdk(script) as km, pytest.raises(RateLimitError) as limited:
        km.tag("n", {"a": "b"})
    assert limited.value.retry_after == 7.0


def test_connection_failures_and_timeouts_are_their_own_errors(monkeypatch) -> None:
    monkeypatch.setattr("time.sleep", lambda s: None)
    script = Script(*[httpx.ConnectError("refused")] * 3)
    with _sdk(script) as km, pytest.raises(APIConnectionError):
        km.get("n")
    script = Script(httpx.ReadTimeout("slow"))
    with _sdk(script, retries=0) as km, pytest.raises(APITimeoutError):
        km.get("n")
    script = Script(httpx.Response(502, text="<html>bad gateway</html>"))
    with _sdk(script, retries=0) as km, pytest.raises(Exception) as proxy:
        km.get("n")
    assert getattr(proxy.value, "status", None) == 502


def test_admin_client_manages_tenants_and_keys(live_url) -> None:
    from keepmem_client.admin import Admin

    from tests.conftest import ADMIN_TOKEN

    with Admin(live_url, ADMIN_TOKEN) as admin:
        made = admin.create_tenant("sdk-admin-tenant")
        assert made.api_key.key and made.api_key.key.startswith("km_")
        key = admin.create_key(made.tenant.id, name="ci", scopes=["read"])
        assert key.scopes == ["read"] and key.key
        assert {k.name for k in admin.keys(made.tenant.id)} == {"initial", "ci"}
        assert admin.revoke_key(made.tenant.id, key.id).revoked_at is not None
        assert made.tenant.id in {t.id for t in admin.tenants()}
        with Keepmem(live_url, made.api_key.key) as km:
            assert km.put("hello").id.startswith("%")
    with Admin(live_url, "wrong") as admin, pytest.raises(AuthenticationError):
        admin.tenants()
