"""OAuth hardening (issue 30): tokens only for this server (RFC 8707
audience), trusted issuers per tenant, the project cap through consent, and
a bounded dynamic client registration (RFC 7591)."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import httpx
import httpx2
import pytest
from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from sqlalchemy import text

from app import tenancy
from app.main import create_app
from app.oauth.keyring import Keyring
from tests.conftest import SECRET, serving
from tests.test_oauth import REDIRECT, _authorize_url, _Form, _pkce, consent
from tests.test_oauth_issuers import ISSUER, _idp_key, _token

EVIL = "http://evil.example/"


def _claims(token: str) -> dict[str, Any]:
    return json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))


def _service_token(http: httpx.Client, base: str, tenant, **data: str) -> httpx.Response:
    svc = http.post(
        f"{base}/v1/oauth/clients",
        headers=tenant.headers,
        json={"name": "aud", "project": "default", "scopes": ["read", "write"]},
    ).json()
    return http.post(
        f"{base}/oauth/token",
        data={"grant_type": "client_credentials", **data},
        auth=(svc["client_id"], svc["client_secret"]),
    )


def _public_client(http: httpx.Client, base: str) -> str:
    r = http.post(
        f"{base}/oauth/register",
        json={"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"},
    )
    assert r.status_code == 201, r.text
    return str(r.json()["client_id"])


def _code(http: httpx.Client, url: str, key: str, project: str = "default") -> str:
    answer = consent(http, url, key, project=project, scopes=["read", "write"])
    assert answer.status_code == 302, answer.text
    return parse_qs(urlparse(answer.headers["location"]).query)["code"][0]


def _exchange(http: httpx.Client, base: str, cid: str, code: str, verifier: str, **extra: str):
    return http.post(
        f"{base}/oauth/token",
        data={
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": REDIRECT,
            "client_id": cid,
            "code_verifier": verifier,
            **extra,
        },
    )


# -- 1. audience: tokens for this server only ------------------------------------------


def test_a_resource_that_is_not_this_server_is_invalid_target(live_url, tenant) -> None:
    with httpx.Client(timeout=30) as http:
        cid = _public_client(http, live_url)
        verifier, challenge = _pkce()
        # the authorization request: refused before anyone signs in...
        evil_url = _authorize_url(live_url, cid, challenge, resource=EVIL)
        page = http.get(evil_url)
        assert page.status_code == 400 and "invalid_target" in page.text
        # ...and the consent form's answer too (no code is issued)
        form = {"api_key": tenant.key, "project": "default", "scopes": "read"}
        posted = http.post(
            evil_url.split("?")[0],
            data={**dict(parse_qs(urlparse(evil_url).query, keep_blank_values=True)), **form},
            follow_redirects=False,
        )
        assert posted.status_code == 400 and "location" not in posted.headers
        assert "invalid_target" in posted.text
        # a code for this server cannot be exchanged for a token for another
        code = _code(http, _authorize_url(live_url, cid, challenge), tenant.key)
        r = _exchange(http, live_url, cid, code, verifier, resource=EVIL)
        assert r.status_code == 400 and r.json()["error"] == "invalid_target"
        assert "evil.example" in r.json()["error_description"]
        # several resources: every one must be this server
        r = http.post(
            f"{live_url}/oauth/token",
            content=urlencode(
                [
                    ("grant_type", "authorization_code"),
                    ("code", code),
                    ("redirect_uri", REDIRECT),
                    ("client_id", cid),
                    ("code_verifier", verifier),
                    ("resource", f"{live_url}/mcp"),
                    ("resource", EVIL),
                ]
            ),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert r.status_code == 400 and r.json()["error"] == "invalid_target"
        # the code was not spent by the refusals: the normal flow still works,
        # for the MCP resource (a trailing slash is the same resource)
        r = _exchange(http, live_url, cid, code, verifier, resource=f"{live_url}/mcp/")
        assert r.status_code == 200, r.text
        token = r.json()["access_token"]
        assert _claims(token)["aud"] == f"{live_url}/mcp/"
        me = http.get(f"{live_url}/v1/whoami", headers={"Authorization": f"Bearer {token}"})
        assert me.status_code == 200, me.text
        # client credentials: the same rule
        r = _service_token(http, live_url, tenant, resource=EVIL)
        assert r.status_code == 400 and r.json()["error"] == "invalid_target"
        r = _service_token(http, live_url, tenant, resource="https://keepmem.test.evil.example")
        assert r.status_code == 400 and r.json()["error"] == "invalid_target"
        r = _service_token(http, live_url, tenant)  # no resource: this server's base URL
        assert r.status_code == 200 and _claims(r.json()["access_token"])["aud"] == live_url


async def _resigned(db, token: str, **changes: Any) -> str:
    """The token with its claims changed, signed with keepmem's own key."""
    async with db.transaction() as session:
        key = await Keyring(SECRET, access_ttl_s=900).signing_key(session)
    claims = {**_claims(token), **changes}
    return jwt.encode({"alg": "RS256", "kid": key.kid, "typ": "at+jwt"}, claims, KeySet([key]))


async def test_a_token_of_ours_for_another_audience_gets_401(live_url, tenant, db) -> None:
    with httpx.Client(timeout=30) as http:
        token = _service_token(http, live_url, tenant).json()["access_token"]
    # the control: re-signed as it was, it works (the test's signing is sound)
    same = await _resigned(db, token)
    foreign = await _resigned(db, token, aud=EVIL)
    listed = await _resigned(db, token, aud=[EVIL, "urn:other"])
    other_host = await _resigned(db, token, aud=live_url.replace("127.0.0.1", "localhost"))
    with httpx.Client(timeout=30) as http:

        def whoami(tok: str) -> httpx.Response:
            return http.get(f"{live_url}/v1/whoami", headers={"Authorization": f"Bearer {tok}"})

        assert whoami(same).status_code == 200
        for bad in (foreign, listed, other_host):
            r = whoami(bad)
            assert r.status_code == 401 and "not for this server" in r.json()["error"], r.text
            notes = http.get(f"{live_url}/v1/notes", headers={"Authorization": f"Bearer {bad}"})
            assert notes.status_code == 401
            mcp = http.post(
                f"{live_url}/mcp",
                json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
                headers={"Authorization": f"Bearer {bad}", "Accept": "application/json"},
            )
            assert mcp.status_code == 401 and "not for this server" in mcp.json()["error"]
        # an audience list holding this server is accepted
        both = await _resigned(db, token, aud=[EVIL, f"{live_url}/mcp"])
        assert whoami(both).status_code == 200


def test_tokens_name_the_public_url_when_one_is_set(settings, tenant) -> None:
    public = "https://mem.example.com"
    configured = settings.model_copy(update={"public_url": public})
    with serving(create_app(configured)) as url, httpx.Client(timeout=30) as http:
        r = _service_token(http, url, tenant)
        assert r.status_code == 200, r.text
        token = r.json()["access_token"]
        assert _claims(token)["aud"] == public and _claims(token)["iss"] == public
        # reached at another address, the server is still the public URL's
        auth = {"Authorization": f"Bearer {token}"}
        assert http.get(f"{url}/v1/whoami", headers=auth).status_code == 200
        prm = http.get(f"{url}/.well-known/oauth-protected-resource/mcp").json()
        assert prm["resource"] == f"{public}/mcp"
        r = _service_token(http, url, tenant, resource=f"{url}/mcp")  # not its resource
        assert r.status_code == 400 and r.json()["error"] == "invalid_target"
        r = _service_token(http, url, tenant, resource=f"{public}/mcp")
        assert r.status_code == 200, r.text


# -- 3. trusted issuers: per tenant, no oracle, tokens name their tenant ---------------


def _idp_token(key: RSAKey, audience: str, **claims: Any) -> str:
    return _token(key, aud=audience, **claims)


async def _trust(client, tenant, audience: str, key: RSAKey) -> httpx.Response:
    return await client.post(
        "/v1/oauth/issuers",
        headers=tenant.headers,
        json={
            "issuer": ISSUER,
            "audience": audience,
            "jwks": {"keys": [key.as_dict(private=False)]},
            "scope_claim": "scp",
        },
    )


async def test_two_tenants_trust_one_issuer_and_tokens_name_their_tenant(
    client, make_tenant
) -> None:
    a, b, c = await make_tenant(), await make_tenant(), await make_tenant()
    key, squatter_key = _idp_key(), _idp_key("idp-2")
    audience = f"keepmem-{uuid.uuid4().hex[:8]}"
    first = await _trust(client, a, audience, key)
    assert first.status_code == 201, first.text
    # one tenant trusts the pair: its tokens need no header
    token = _idp_token(key, audience, scp="read write")
    auth = {"Authorization": f"Bearer {token}"}
    r = await client.post("/v1/notes", headers=auth, json={"id": "sso-a0", "content": "a"})
    assert r.status_code == 200, r.text
    # a second tenant may trust the same pair: 201, and nothing about tenant A
    second = await _trust(client, b, audience, key)
    assert second.status_code == 201, second.text
    assert str(a.id) not in second.text and a.name not in second.text
    # each tenant's own duplicate is still a conflict, about itself alone
    again = await _trust(client, b, audience, key)
    assert again.status_code == 409
    assert "this tenant already trusts" in again.json()["error"]
    assert str(a.id) not in again.text
    # now the token must name its tenant
    r = await client.get("/v1/notes", headers=auth)
    assert r.status_code == 401 and "X-Keepmem-Tenant" in r.json()["error"]
    for tenant, note in ((a, "sso-a"), (b, "sso-b")):
        named = {**auth, "X-Keepmem-Tenant": str(tenant.id)}
        r = await client.post("/v1/notes", headers=named, json={"id": note, "content": "x"})
        assert r.status_code == 200, r.text
        assert (await client.get(f"/v1/notes/{note}", headers=tenant.headers)).status_code == 200
        me = (await client.get("/v1/whoami", headers=named)).json()
        assert me["tenant_id"] == str(tenant.id), me
    # B did not get A's note, nor A B's
    assert (await client.get("/v1/notes/sso-b", headers=a.headers)).status_code == 404
    assert (await client.get("/v1/notes/sso-a", headers=b.headers)).status_code == 404
    # a tenant that does not trust the pair, named: 401, worded as an unknown issuer
    unknown = _idp_token(key, f"nobody-{uuid.uuid4().hex[:6]}")
    r_unknown = await client.get("/v1/notes", headers={"Authorization": f"Bearer {unknown}"})
    r = await client.get("/v1/notes", headers={**auth, "X-Keepmem-Tenant": str(c.id)})
    assert r.status_code == 401 and r.json()["error"] == r_unknown.json()["error"]
    r = await client.get("/v1/notes", headers={**auth, "X-Keepmem-Tenant": "tenant-a"})
    assert r.status_code == 401 and "UUID" in r.json()["error"]
    # a token no trusting tenant's keys verify learns nothing of who trusts the pair
    forged = _idp_token(squatter_key, audience, scp="read write")
    r = await client.get("/v1/notes", headers={"Authorization": f"Bearer {forged}"})
    assert r.status_code == 401 and "X-Keepmem-Tenant" not in r.json()["error"]
    # a squatter trusting the pair with its own key gets no access to A's side,
    # and A's tokens still work when they name A
    squat = await _trust(client, c, audience, squatter_key)
    assert squat.status_code == 201
    named_a = {**auth, "X-Keepmem-Tenant": str(a.id)}
    assert (await client.get("/v1/notes/sso-a", headers=named_a)).status_code == 200
    named_c = {**auth, "X-Keepmem-Tenant": str(c.id)}  # A's token, C named: C's key refuses it
    assert (await client.get("/v1/notes", headers=named_c)).status_code == 401
    # when all but one stop trusting it, the header is optional again
    for tenant in (b, c):
        issuers = (await client.get("/v1/oauth/issuers", headers=tenant.headers)).json()
        for row in issuers["issuers"]:
            await client.delete(f"/v1/oauth/issuers/{row['id']}", headers=tenant.headers)
    assert (await client.get("/v1/notes/sso-a", headers=auth)).status_code == 200


async def test_a_named_tenant_reaches_mcp_tools_too(live_url, make_tenant) -> None:
    a, b = await make_tenant(), await make_tenant()
    key = _idp_key()
    audience = f"keepmem-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(base_url=live_url, timeout=30) as http:
        for tenant in (a, b):
            assert (await _trust(http, tenant, audience, key)).status_code == 201
    headers = {
        "Authorization": f"Bearer {_idp_token(key, audience, scp='read write')}",
        "X-Keepmem-Tenant": str(b.id),
    }
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http2,
        streamable_http_client(f"{live_url}/mcp", http_client=http2) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        stored = await session.call_tool("remember", {"content": "via sso", "id": "sso-mcp"})
        assert not getattr(stored, "isError", False), stored
    with httpx.Client(timeout=30) as http:
        assert http.get(f"{live_url}/v1/notes/sso-mcp", headers=b.headers).status_code == 200
        assert http.get(f"{live_url}/v1/notes/sso-mcp", headers=a.headers).status_code == 404


# -- 4. the project cap holds through the consent page ---------------------------------


@pytest.fixture
def capped_url(settings) -> Iterator[str]:
    with serving(create_app(settings.model_copy(update={"max_projects_per_tenant": 3}))) as url:
        yield url


def test_consent_cannot_create_a_project_past_the_cap(capped_url, tenant) -> None:
    base = capped_url
    with httpx.Client(timeout=30) as http:
        for slug in ("p-1", "p-2"):  # with "default", the tenant's three
            r = http.get(f"{base}/v1/notes", headers=tenant.project(slug))
            assert r.status_code == 200, r.text
        header_path = http.get(f"{base}/v1/notes", headers=tenant.project("p-3"))
        assert header_path.status_code == 403 and header_path.json()["code"] == "project_limit"
        cid = _public_client(http, base)
        _, challenge = _pkce()
        refused = consent(
            http, _authorize_url(base, cid, challenge), tenant.key,
            project="p-3", scopes=["read", "write"],
        )  # fmt: skip
        assert refused.status_code == 403 and "location" not in refused.headers
        assert "maximum of 3 projects" in refused.text
        # nothing was made: the header path still finds no p-3
        r = http.get(f"{base}/v1/notes", headers=tenant.project("p-3"))
        assert r.status_code == 403 and r.json()["code"] == "project_limit"
        # an existing project is still granted
        ok = consent(
            http, _authorize_url(base, cid, challenge), tenant.key,
            project="p-2", scopes=["read"],
        )  # fmt: skip
        assert ok.status_code == 302 and "code=" in ok.headers["location"]


# -- 8. dynamic client registration, bounded -------------------------------------------


@asynccontextmanager
async def _app(settings, db, address: str = "127.0.0.1", **overrides: Any):
    app = create_app(settings.model_copy(update=overrides), db=db)
    transport = httpx.ASGITransport(app=app, client=(address, 4321))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c,
    ):
        yield c


@pytest.fixture
async def loopback(settings, db) -> AsyncIterator[httpx.AsyncClient]:
    """keepmem in process, reached at a loopback address (OAuth needs one, or https)."""
    async with _app(settings, db) as c:
        yield c


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


async def test_a_deeply_nested_registration_is_a_clean_400(loopback) -> None:
    for raw in (
        nested(20_000),
        f'{{"redirect_uris": ["{REDIRECT}"], "client_name": "x", "x": {nested(20_000)}}}',
        '{"a":' * 5_000 + "1" + "}" * 5_000,
        nested(65),
    ):
        r = await loopback.post(
            "/oauth/register", content=raw, headers={"Content-Type": "application/json"}
        )
        assert r.status_code == 400, (raw[:40], r.text)
        assert r.json()["error"] == "invalid_client_metadata"
        assert "nested too deeply" in r.json()["error_description"]


async def test_a_registration_body_is_bounded(loopback) -> None:
    big = {"redirect_uris": [REDIRECT], "client_name": "x", "junk": "y" * 70_000}
    r = await loopback.post("/oauth/register", json=big)
    assert r.status_code == 413 and r.json()["code"] == "payload_too_large"
    # the largest metadata the schema admits fits
    most = {
        "redirect_uris": [f"https://a.example/{i}/" + "p" * 1980 for i in range(10)],
        "client_name": "n" * 200,
        "client_uri": "https://a.example/" + "c" * 1980,
        "contacts": ["c" * 320] * 10,
    }
    assert len(json.dumps(most)) > 16_000
    r = await loopback.post("/oauth/register", json=most)
    assert r.status_code == 201, r.text


BAD_METADATA: dict[str, tuple[Any, str]] = {
    "not an object": ([REDIRECT], "invalid_client_metadata"),
    "not json": ("{redirect_uris: nope", "invalid_client_metadata"),
    "nan": (
        '{"redirect_uris": ["' + REDIRECT + '"], "client_name": NaN}',
        "invalid_client_metadata",
    ),
    "nul": ({"redirect_uris": [REDIRECT], "client_name": "a\u0000b"}, "invalid_client_metadata"),
    "no redirect_uris": ({"client_name": "x"}, "invalid_client_metadata"),
    "empty redirect_uris": ({"redirect_uris": []}, "invalid_client_metadata"),
    "redirect_uris a string": ({"redirect_uris": REDIRECT}, "invalid_client_metadata"),
    "eleven redirect_uris": (
        {"redirect_uris": [f"https://a.example/{i}" for i in range(11)]},
        "invalid_client_metadata",
    ),
    "redirect uri a number": ({"redirect_uris": [5]}, "invalid_redirect_uri"),
    "redirect uri too long": (
        {"redirect_uris": ["https://a.example/" + "x" * 2000]},
        "invalid_redirect_uri",
    ),
    "http to a public host": ({"redirect_uris": ["http://a.example/cb"]}, "invalid_redirect_uri"),
    "http to a private address": (
        {"redirect_uris": ["http://10.0.0.1/cb"]},
        "invalid_redirect_uri",
    ),
    "fragment": ({"redirect_uris": ["https://a.example/cb#frag"]}, "invalid_redirect_uri"),
    "empty fragment": ({"redirect_uris": ["https://a.example/cb#"]}, "invalid_redirect_uri"),
    "user info": ({"redirect_uris": ["https://u:p@a.example/cb"]}, "invalid_redirect_uri"),
    "javascript": ({"redirect_uris": ["javascript:alert(1)"]}, "invalid_redirect_uri"),
    "data scheme": ({"redirect_uris": ["data:text/html,hi"]}, "invalid_redirect_uri"),
    "file scheme": ({"redirect_uris": ["file:///etc/passwd"]}, "invalid_redirect_uri"),
    "private-use scheme with a fragment": (
        {"redirect_uris": ["myapp://cb#x"]},
        "invalid_redirect_uri",
    ),
    "private-use scheme with a space": (
        {"redirect_uris": ["myapp://c b"]},
        "invalid_redirect_uri",
    ),
    "relative": ({"redirect_uris": ["/cb"]}, "invalid_redirect_uri"),
    "space": ({"redirect_uris": ["https://a.example/c b"]}, "invalid_redirect_uri"),
    "bad port": ({"redirect_uris": ["https://a.example:99999/cb"]}, "invalid_redirect_uri"),
    "broken ipv6": ({"redirect_uris": ["http://[::1/cb"]}, "invalid_redirect_uri"),
    "client_name too long": (
        {"redirect_uris": [REDIRECT], "client_name": "n" * 201},
        "invalid_client_metadata",
    ),
    "client_name a number": (
        {"redirect_uris": [REDIRECT], "client_name": 7},
        "invalid_client_metadata",
    ),
    "client_name an object": (
        {"redirect_uris": [REDIRECT], "client_name": {"en": "x"}},
        "invalid_client_metadata",
    ),
    "client credentials": (
        {"redirect_uris": [REDIRECT], "grant_types": ["client_credentials"]},
        "invalid_client_metadata",
    ),
    "grant_types a string": (
        {"redirect_uris": [REDIRECT], "grant_types": "authorization_code"},
        "invalid_client_metadata",
    ),
    "implicit": (
        {"redirect_uris": [REDIRECT], "response_types": ["token"]},
        "invalid_client_metadata",
    ),
    "auth method": (
        {"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "private_key_jwt"},
        "invalid_client_metadata",
    ),
    "unknown scope": (
        {"redirect_uris": [REDIRECT], "scope": "read root"},
        "invalid_client_metadata",
    ),
    "contacts a string": (
        {"redirect_uris": [REDIRECT], "contacts": "a@b.example"},
        "invalid_client_metadata",
    ),
    "client_uri not a url": (
        {"redirect_uris": [REDIRECT], "client_uri": "not a url"},
        "invalid_client_metadata",
    ),
    "logo_uri a list": (
        {"redirect_uris": [REDIRECT], "logo_uri": ["https://a.example/l.png"]},
        "invalid_client_metadata",
    ),
}


@pytest.mark.parametrize("name", list(BAD_METADATA))
async def test_bad_registration_metadata_is_an_rfc7591_400(name: str, loopback, db) -> None:
    body, error = BAD_METADATA[name]
    raw = body if isinstance(body, str) else json.dumps(body)
    async with tenancy.system_transaction(db) as session:
        before = await session.scalar(text("SELECT count(*) FROM oauth_clients"))
    r = await loopback.post(
        "/oauth/register", content=raw, headers={"Content-Type": "application/json"}
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"] == error, r.json()
    assert r.json()["error_description"]
    assert r.headers["cache-control"] == "no-store"
    async with tenancy.system_transaction(db) as session:
        after = await session.scalar(text("SELECT count(*) FROM oauth_clients"))
    assert after == before


async def test_good_registrations_and_what_is_kept(loopback) -> None:
    for uri in (
        "https://app.example/cb",
        "http://127.0.0.1:33418/cb",
        "http://[::1]:8080/callback",
        "http://localhost:6274/oauth/callback",
        "https://app.example/cb?x=1",
        # native apps' private-use schemes (RFC 8252 7.1), as Cursor and VS Code register
        "cursor://anysphere.cursor-retrieval/oauth/user-keepmem/callback",
        "com.example.agent:/oauth2redirect",
    ):
        r = await loopback.post("/oauth/register", json={"redirect_uris": [uri]})
        assert r.status_code == 201, (uri, r.text)
    r = await loopback.post(
        "/oauth/register",
        json={
            "redirect_uris": [REDIRECT],
            "client_name": "agent",
            "grant_types": ["authorization_code", "refresh_token"],
            "scope": "read write",
            "jwks": {"keys": []},  # not used by keepmem: dropped
            "x-vendor": {"anything": [1, 2]},  # unknown: dropped
        },
    )
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["client_id"].startswith("mcp_") and body["client_secret"]
    assert body["client_name"] == "agent" and body["response_types"] == ["code"]
    assert "jwks" not in body and "x-vendor" not in body


async def test_registrations_per_address_are_rate_limited(settings, db) -> None:
    address = f"10.{uuid.uuid4().int % 250}.7.9"
    async with _app(settings, db, address, oauth_registrations_per_minute=3) as c:
        codes = [
            (await c.post("/oauth/register", json={"redirect_uris": [REDIRECT]})).status_code
            for _ in range(5)
        ]
        assert codes[:3] == [201, 201, 201] and codes[3:] == [429, 429]
        r = await c.post("/oauth/register", json={"redirect_uris": [REDIRECT]})
        assert r.status_code == 429 and r.json()["code"] == "rate_limited"
        assert int(r.headers["retry-after"]) >= 1
        # a bad request counts too (before the body is read)
        assert (await c.post("/oauth/register", content=b"[")).status_code == 429
    # another address has its own bucket
    async with _app(settings, db, address + "0", oauth_registrations_per_minute=3) as c:
        r = await c.post("/oauth/register", json={"redirect_uris": [REDIRECT]})
        assert r.status_code == 201


async def _clients_left(db, ids: list[str]) -> set[str]:
    async with tenancy.system_transaction(db) as session:
        rows = await session.execute(
            text("SELECT client_id FROM oauth_clients WHERE client_id = ANY(:ids)"), {"ids": ids}
        )
        return {row.client_id for row in rows}


async def test_unused_registered_clients_are_capped_oldest_first(settings, db, tenant) -> None:
    async with _app(settings, db, oauth_max_unused_clients=3) as c:

        async def register() -> dict[str, Any]:
            r = await c.post(
                "/oauth/register",
                json={"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"},
            )
            assert r.status_code == 201, r.text
            return r.json()

        async def code_for(cid: str, challenge: str) -> str:
            url = _authorize_url("http://127.0.0.1", cid, challenge)
            page = await c.get(url)
            assert page.status_code == 200, page.text
            form = _Form()
            form.feed(page.text)
            data = {**form.hidden, "api_key": tenant.key, "project": "default",
                    "decision": "allow", "scopes": "read"}  # fmt: skip
            answer = await c.post("/oauth/authorize", data=data)
            assert answer.status_code == 302, answer.text
            return parse_qs(urlparse(answer.headers["location"]).query)["code"][0]

        # a client that completes a grant is kept however old
        used = (await register())["client_id"]
        verifier, challenge = _pkce()
        code = await code_for(used, challenge)
        token = await c.post(
            "/oauth/token",
            data={"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT,
                  "client_id": used, "code_verifier": verifier},
        )  # fmt: skip
        assert token.status_code == 200, token.text
        # a client in the middle of its consent (holding a code) is kept
        pending = (await register())["client_id"]
        await code_for(pending, _pkce()[1])
        fresh = [(await register())["client_id"] for _ in range(5)]
        left = await _clients_left(db, [used, pending, *fresh])
        assert left == {used, pending, *fresh[-3:]}
        # a pruned client is unknown: its authorization request is refused
        page = await c.get(_authorize_url("http://127.0.0.1", fresh[0], _pkce()[1]))
        assert page.status_code == 400 and "invalid_client" in page.text
    async with tenancy.system_transaction(db) as session:
        unused = await session.scalar(
            text(
                "SELECT count(*) FROM oauth_clients WHERE tenant_id IS NULL AND used_at IS NULL "
                "AND NOT EXISTS (SELECT 1 FROM oauth_codes o WHERE o.client_id = "
                "oauth_clients.client_id)"
            )
        )
    assert unused <= 3
