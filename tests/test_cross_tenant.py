"""One table of what a tenant owns beyond its notes — webhooks, service
accounts, trusted issuers, OAuth tokens, audit entries, changes and live
events — tried by another tenant with its own admin key and its own OAuth
client against keepmem served over HTTP. Every route that names one of the
first tenant's things answers 404 (never 403: that would confirm it exists),
every list, feed and stream shows nothing of it, and afterwards the owner
still has each thing, untouched.

(Notes themselves: tests/test_auth.py; jobs and tasks: tests/test_hardening.py;
row-level security beneath all of it: tests/test_rls.py.)
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from httpx_sse import aconnect_sse
from joserfc.jwk import RSAKey

from app.main import create_app
from app.settings import Settings
from tests.conftest import Tenant, serving

MARK = "owner-only-7f3a"  # in every name, id and text the owner writes


@pytest.fixture(scope="module")
def base(settings: Settings) -> Iterator[str]:
    quick = {
        "events_poll_seconds": 0.05,
        "events_heartbeat_seconds": 0.3,
        "rate_limit_per_minute": 0,
        "auth_failures_per_minute": 0,
        # webhooks point at a port on this machine nobody listens on
        "fetch_allow_networks": ["127.0.0.1/32"],
    }
    with serving(create_app(settings.model_copy(update=quick))) as url:
        yield url


@dataclass
class Owned:
    """One of everything, made by the owner."""

    webhook: str
    client_id: str
    client_secret: str
    issuer: str
    token: str

    @property
    def named(self) -> dict[str, str]:
        return {
            "webhook": self.webhook,
            "client": self.client_id,
            "issuer": self.issuer,
        }


def _ok(r: httpx.Response, *status: int) -> dict[str, Any]:
    assert r.status_code in (status or (200, 201)), (r.request.url, r.status_code, r.text)
    return r.json() if r.content else {}


def _make_everything(http: httpx.Client, owner: Tenant) -> Owned:
    h = owner.headers
    hook = _ok(
        http.post(
            "/v1/webhooks",
            headers=h,
            json={"url": f"http://127.0.0.1:9/{MARK}", "description": MARK},
        )
    )
    svc = _ok(
        http.post(
            "/v1/oauth/clients",
            headers=h,
            json={"name": MARK, "project": "default", "scopes": ["read", "write"]},
        )
    )
    key = RSAKey.generate_key(2048, parameters={"kid": MARK}, private=True)
    issuer = _ok(
        http.post(
            "/v1/oauth/issuers",
            headers=h,
            json={
                "issuer": f"https://idp.example.com/{MARK}",
                "audience": f"aud-{uuid.uuid4().hex[:8]}",
                "jwks": {"keys": [key.as_dict(private=False)]},
            },
        )
    )
    token = _ok(
        http.post(
            "/oauth/token",
            data={"grant_type": "client_credentials"},
            auth=(svc["client_id"], svc["client_secret"]),
        )
    )["access_token"]
    _ok(http.post("/v1/notes", headers=h, json={"id": MARK, "content": f"{MARK} secret plan"}))
    return Owned(hook["id"], svc["client_id"], svc["client_secret"], issuer["id"], token)


# What the other tenant tries, naming the owner's things ({webhook}, {client},
# {issuer} are filled in). Every one must be 404 with the error shape.
BY_ID = [
    ("GET", "/v1/webhooks/{webhook}", None),
    ("PATCH", "/v1/webhooks/{webhook}", {"active": False}),
    ("PATCH", "/v1/webhooks/{webhook}", {"url": "http://127.0.0.1:9/taken"}),
    ("POST", "/v1/webhooks/{webhook}/ping", None),
    ("GET", "/v1/webhooks/{webhook}/deliveries", None),
    ("DELETE", "/v1/webhooks/{webhook}", None),
    ("DELETE", "/v1/oauth/clients/{client}", None),
    ("DELETE", "/v1/oauth/issuers/{issuer}", None),
]

# Lists and feeds the other tenant reads: nothing of the owner's in them.
LISTS = [
    "/v1/webhooks",
    "/v1/oauth/clients",
    "/v1/oauth/issuers",
    "/v1/audit?limit=500",
    "/v1/export/changes?cursor=0&limit=1000",
    "/v1/notes",
    "/v1/jobs",
]


@pytest.fixture(scope="module")
def two(base: str) -> Iterator[tuple[Tenant, Tenant, Owned]]:
    """The owner with one of everything, and another tenant."""
    from tests.conftest import ADMIN_TOKEN

    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    made = []
    with httpx.Client(base_url=base, timeout=30) as http:
        for _ in range(2):
            name = f"x-{uuid.uuid4().hex[:10]}"
            r = _ok(http.post("/v1/admin/tenants", headers=admin, json={"name": name}), 201)
            made.append(Tenant(uuid.UUID(r["tenant"]["id"]), name, r["api_key"]["key"]))
        owner, other = made
        yield owner, other, _make_everything(http, owner)


@pytest.mark.parametrize("method, path, body", BY_ID)
def test_naming_another_tenants_thing_is_404(base, two, method, path, body) -> None:
    owner, other, owned = two
    url = path.format(**owned.named)
    with httpx.Client(base_url=base, timeout=30) as http:
        r = http.request(method, url, headers=other.headers, json=body)
        assert r.status_code == 404, (method, url, r.status_code, r.text)
        assert set(r.json()) >= {"error", "code", "request_id"} and r.json()["error"]
        # the owner's thing is still there, as it was
        assert _still_there(http, owner, owned)


def _still_there(http: httpx.Client, owner: Tenant, owned: Owned) -> bool:
    hook = http.get(f"/v1/webhooks/{owned.webhook}", headers=owner.headers)
    clients = http.get("/v1/oauth/clients", headers=owner.headers).json()["clients"]
    issuers = http.get("/v1/oauth/issuers", headers=owner.headers).json()["issuers"]
    token = http.get("/v1/whoami", headers={"Authorization": f"Bearer {owned.token}"})
    return (
        hook.status_code == 200
        and hook.json()["active"] is True
        and hook.json()["url"].endswith(MARK)
        and any(c["client_id"] == owned.client_id and not c.get("revoked_at") for c in clients)
        and any(i["id"] == owned.issuer for i in issuers)
        and token.status_code == 200
    )


@pytest.mark.parametrize("path", LISTS)
def test_lists_and_feeds_show_nothing_of_another_tenant(base, two, path) -> None:
    owner, other, owned = two
    with httpx.Client(base_url=base, timeout=30) as http:
        mine = http.get(path, headers=owner.headers)
        theirs = http.get(path, headers=other.headers)
    assert mine.status_code == 200 and theirs.status_code == 200, (mine.text, theirs.text)
    # the owner's own view has its things (so the check below can fail) ...
    if path not in ("/v1/jobs",):
        assert _mentions(mine.json(), owned), path
    # ... and the other tenant's view has none of them
    assert not _mentions(theirs.json(), owned), (path, theirs.text[:2000])


def _mentions(body: Any, owned: Owned) -> bool:
    text = json.dumps(body)
    return any(s in text for s in (MARK, owned.webhook, owned.client_id, owned.issuer))


def test_another_tenants_client_cannot_introspect_or_revoke_the_owners_token(base, two) -> None:
    owner, other, owned = two
    with httpx.Client(base_url=base, timeout=30) as http:
        svc = _ok(
            http.post(
                "/v1/oauth/clients",
                headers=other.headers,
                json={"name": "snoop", "project": "default", "scopes": ["read"]},
            )
        )
        creds = (svc["client_id"], svc["client_secret"])
        info = _ok(http.post("/oauth/introspect", data={"token": owned.token}, auth=creds))
        assert info == {"active": False}
        http.post("/oauth/revoke", data={"token": owned.token}, auth=creds)
        # the owner's token still works, and still reaches only the owner
        me = _ok(http.get("/v1/whoami", headers={"Authorization": f"Bearer {owned.token}"}))
        assert me["tenant_id"] == str(owner.id)
        # and the other's own client cannot mint a token for the owner's project
        theirs = _ok(
            http.post("/oauth/token", data={"grant_type": "client_credentials"}, auth=creds)
        )["access_token"]
        r = http.get(f"/v1/notes/{MARK}", headers={"Authorization": f"Bearer {theirs}"})
        assert r.status_code == 404


def test_the_owners_token_reaches_nothing_of_another_tenant(base, two) -> None:
    owner, other, owned = two
    with httpx.Client(base_url=base, timeout=30) as http:
        _ok(http.post("/v1/notes", headers=other.headers, json={"id": "b-only", "content": "b"}))
        auth = {"Authorization": f"Bearer {owned.token}"}
        assert _ok(http.get("/v1/whoami", headers=auth))["tenant_id"] == str(owner.id)
        assert http.get("/v1/notes/b-only", headers=auth).status_code == 404
        # a project header naming another tenant's project is still the owner's own
        r = http.get("/v1/notes", headers={**auth, "X-Project": "default"})
        assert r.status_code in (200, 403) and "b-only" not in r.text


async def test_live_events_never_carry_another_tenants_writes(base, two) -> None:
    owner, other, _ = two
    got: list[Any] = []
    opened = asyncio.Event()

    async def watch() -> None:
        async with (
            httpx.AsyncClient(base_url=base, timeout=30) as http,
            aconnect_sse(http, "GET", "/v1/events", headers=other.headers) as source,
        ):
            assert source.response.status_code == 200
            opened.set()
            async for sse in source.aiter_sse():
                if sse.event:
                    got.append(sse)
                if any(MARK not in s.data and "b-live" in s.data for s in got):
                    return

    task = asyncio.create_task(watch())
    await asyncio.wait_for(opened.wait(), 10)
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        for i in range(5):
            r = await http.post(
                "/v1/notes", headers=owner.headers, json={"id": f"{MARK}-{i}", "content": MARK}
            )
            assert r.status_code == 200
        r = await http.post(
            "/v1/notes", headers=other.headers, json={"id": "b-live", "content": "mine"}
        )
        assert r.status_code == 200
    await asyncio.wait_for(task, 15)
    assert got and all(MARK not in e.data for e in got), [e.data for e in got]
    assert any("b-live" in e.data for e in got)


def test_audit_of_another_tenant_is_not_reachable_by_its_own_cursor(base, two) -> None:
    """The owner's audit page cursor, handed to another tenant, names nothing
    the other tenant has: 400 cursor_expired, nothing of the owner's."""
    owner, other, _ = two
    with httpx.Client(base_url=base, timeout=30) as http:
        page = _ok(http.get("/v1/audit?limit=1", headers=owner.headers))
        cursor = page["next_cursor"]
        assert cursor is not None
        r = http.get("/v1/audit", params={"cursor": cursor, "limit": 500}, headers=other.headers)
        assert r.status_code == 400 and r.json()["code"] == "cursor_expired", r.text
        assert MARK not in r.text
