"""OAuth 2.1: a real MCP client (the `mcp` SDK's OAuthClientProvider) through
discovery, dynamic registration, consent, PKCE and token exchange against
keepmem's /mcp; client credentials on the REST API; refresh, revocation,
introspection and expiry."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import secrets
import time
from html.parser import HTMLParser
from urllib.parse import parse_qs, urlencode, urlparse

import httpx
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)

REDIRECT = "http://127.0.0.1:9/callback"


class _Form(HTMLParser):
    """The consent page's hidden fields and scope boxes."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden: dict[str, str] = {}
        self.scopes: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "input" and a.get("type") == "hidden":
            self.hidden[a["name"] or ""] = a.get("value") or ""
        if tag == "input" and a.get("name") == "scopes":
            self.scopes.append(a.get("value") or "")


def consent(
    http: httpx.Client, authorization_url: str, key: str, *, project: str, scopes, tags=""
) -> httpx.Response:
    """What a person does on the consent page: read it, sign in, allow."""
    page = http.get(authorization_url)
    assert page.status_code == 200, page.text
    assert "default-src 'none'" in page.headers["content-security-policy"]
    form = _Form()
    form.feed(page.text)
    data = {
        **form.hidden,
        "api_key": key,
        "project": project,
        "tags": tags,
        "decision": "allow",
    }
    body = urlencode(data) + "".join(f"&scopes={s}" for s in scopes)
    base = authorization_url.split("?")[0]
    return http.post(
        base,
        content=body,
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        follow_redirects=False,
    )


class MemoryStorage:
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


def _text(result) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


async def test_mcp_client_completes_the_authorization_code_flow(live_url, tenant) -> None:
    storage = MemoryStorage()
    redirected: dict[str, str] = {}

    async def redirect_handler(url: str) -> None:
        def person() -> httpx.Response:
            with httpx.Client(timeout=30) as http:
                return consent(http, url, tenant.key, project="oauth-mcp", scopes=["read", "write"])

        answer = await asyncio.to_thread(person)
        assert answer.status_code == 302, answer.text
        location = urlparse(answer.headers["location"])
        assert f"{location.scheme}://{location.netloc}{location.path}" == REDIRECT
        redirected.update({k: v[0] for k, v in parse_qs(location.query).items()})

    async def callback_handler() -> AuthorizationCodeResult:
        return AuthorizationCodeResult(
            code=redirected["code"], state=redirected.get("state"), iss=redirected.get("iss")
        )

    provider = OAuthClientProvider(
        server_url=f"{live_url}/mcp",
        client_metadata=OAuthClientMetadata(
            client_name="test agent",
            redirect_uris=[REDIRECT],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
        ),
        storage=storage,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
    )
    async with (
        httpx2.AsyncClient(auth=provider, timeout=30) as http,
        streamable_http_client(f"{live_url}/mcp", http_client=http) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        stored = await session.call_tool("remember", {"content": "Tokens, not keys", "id": "oa"})
        assert json.loads(_text(stored))["id"] == "oa"
    # the client registered itself, got a code with PKCE and tokens
    assert storage.client is not None and storage.client.client_id.startswith("mcp_")
    assert storage.tokens is not None and storage.tokens.refresh_token
    assert redirected["iss"] == live_url
    access = storage.tokens.access_token
    # the token works on REST too, locked to the project chosen on the consent page
    auth = {"Authorization": f"Bearer {access}"}
    got = httpx.get(f"{live_url}/v1/notes/oa", headers=auth)
    assert got.status_code == 200 and got.json()["summary"] == "Tokens, not keys"
    other = httpx.get(f"{live_url}/v1/notes/oa", headers={**auth, "X-Project": "default"})
    assert other.status_code == 403
    # the key's own view: the note is in project oauth-mcp
    assert httpx.get(f"{live_url}/v1/notes/oa", headers=tenant.project("oauth-mcp")).is_success
    # refresh (rotating), then revoke (RFC 7009): the access token gets 401
    token_url = f"{live_url}/oauth/token"
    client = storage.client
    assert client.token_endpoint_auth_method == "client_secret_basic"
    basic = (client.client_id, client.client_secret or "")
    refreshed = httpx.post(
        token_url,
        data={
            "grant_type": "refresh_token",
            "refresh_token": storage.tokens.refresh_token,
        },
        auth=basic,
    )
    assert refreshed.status_code == 200, refreshed.text
    new = refreshed.json()
    assert new["refresh_token"] != storage.tokens.refresh_token
    reused = httpx.post(
        token_url,
        data={
            "grant_type": "refresh_token",
            "refresh_token": storage.tokens.refresh_token,
        },
        auth=basic,
    )
    assert reused.status_code == 400 and reused.json()["error"] == "invalid_grant"
    fresh = {"Authorization": f"Bearer {new['access_token']}"}
    assert httpx.get(f"{live_url}/v1/notes/oa", headers=fresh).status_code == 200
    revoked = httpx.post(
        f"{live_url}/oauth/revoke",
        data={
            "token": new["access_token"],
        },
        auth=basic,
    )
    assert revoked.status_code == 200, revoked.text
    for headers in (fresh, auth):
        r = httpx.get(f"{live_url}/v1/notes/oa", headers=headers)
        assert r.status_code == 401 and "revoked" in r.json()["error"]
    again = httpx.post(
        token_url,
        data={
            "grant_type": "refresh_token",
            "refresh_token": new["refresh_token"],
        },
        auth=basic,
    )
    assert again.status_code == 400
    # /mcp refuses the revoked token and says where to get a new one
    r = httpx.post(
        f"{live_url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
        headers={**fresh, "Accept": "application/json"},
    )
    assert r.status_code == 401
    assert "oauth-protected-resource/mcp" in r.headers["www-authenticate"]


def _pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=")
    return verifier, challenge.decode()


def _register(http: httpx.Client, base: str, **extra) -> dict:
    r = http.post(
        f"{base}/oauth/register",
        json={"redirect_uris": [REDIRECT], "client_name": "script", **extra},
    )
    assert r.status_code == 201, r.text
    return r.json()


def _authorize_url(base: str, client_id: str, challenge: str | None, **extra) -> str:
    params = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": REDIRECT,
        "state": "s1",
        "scope": "read write",
        **extra,
    }
    if challenge:
        params |= {"code_challenge": challenge, "code_challenge_method": "S256"}
    return f"{base}/oauth/authorize?{urlencode(params)}"


def test_code_flow_refuses_what_oauth_2_1_forbids(live_url, tenant) -> None:
    with httpx.Client(timeout=30) as http:
        reg = _register(http, live_url, token_endpoint_auth_method="none")
        assert reg.get("client_secret") is None
        cid = reg["client_id"]
        # no PKCE: refused on the consent page, before anyone signs in
        page = http.get(_authorize_url(live_url, cid, None))
        assert page.status_code == 400 and "PKCE" in page.text
        # an unregistered redirect URI: refused, never redirected to
        page = http.get(
            _authorize_url(live_url, cid, _pkce()[1], redirect_uri="http://evil.example/cb")
        )
        assert page.status_code == 400 and "location" not in page.headers
        # a wrong API key on the consent page: 401, no code
        verifier, challenge = _pkce()
        bad = consent(
            http,
            _authorize_url(live_url, cid, challenge),
            "km_badkey00_" + "x" * 40,
            project="default",
            scopes=["read"],
        )
        assert bad.status_code == 401 and "location" not in bad.headers
        # a good one; then the wrong verifier fails and the code is spent
        ok = consent(
            http, _authorize_url(live_url, cid, challenge), tenant.key,
            project="default", scopes=["read"],
        )  # fmt: skip
        code = parse_qs(urlparse(ok.headers["location"]).query)["code"][0]
        wrong = http.post(
            f"{live_url}/oauth/token",
            data={
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": REDIRECT,
                "client_id": cid,
                "code_verifier": _pkce()[0],
            },
        )
        assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_grant"
        spent = http.post(
            f"{live_url}/oauth/token",
            data={
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": REDIRECT,
                "client_id": cid,
                "code_verifier": verifier,
            },
        )
        assert spent.status_code == 400
        # a public client cannot use client credentials
        cc = http.post(
            f"{live_url}/oauth/token", data={"grant_type": "client_credentials", "client_id": cid}
        )
        assert cc.status_code in (400, 401)
        # registration cannot ask for client credentials
        r = http.post(
            f"{live_url}/oauth/register",
            json={"redirect_uris": [REDIRECT], "grant_types": ["client_credentials"]},
        )
        assert r.status_code == 400 and r.json()["error"] == "invalid_client_metadata"


def test_consent_narrows_to_what_the_key_holds(live_url, tenant) -> None:
    with httpx.Client(timeout=30) as http:
        reader = http.post(
            f"{live_url}/v1/keys", headers=tenant.headers, json={"name": "r", "scopes": ["read"]}
        ).json()["key"]
        cid = _register(http, live_url, token_endpoint_auth_method="none")["client_id"]
        verifier, challenge = _pkce()
        ok = consent(
            http, _authorize_url(live_url, cid, challenge), reader,
            project="default", scopes=["read", "write"],
        )  # fmt: skip
        assert ok.status_code == 302
        code = parse_qs(urlparse(ok.headers["location"]).query)["code"][0]
        token = http.post(
            f"{live_url}/oauth/token",
            data={
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": REDIRECT,
                "client_id": cid,
                "code_verifier": verifier,
            },
        ).json()
        assert token["scope"] == "read"
        auth = {"Authorization": f"Bearer {token['access_token']}"}
        assert http.get(f"{live_url}/v1/notes", headers=auth).status_code == 200
        w = http.post(f"{live_url}/v1/notes", headers=auth, json={"id": "x", "content": "no"})
        assert w.status_code == 403 and w.json()["code"] == "missing_scope"
        # introspection, by the client the token was issued to
        info = http.post(
            f"{live_url}/oauth/introspect", data={"token": token["access_token"], "client_id": cid}
        ).json()
        assert info["active"] is True and info["scope"] == "read"


def _service_account(http: httpx.Client, base: str, tenant, **body) -> dict:
    r = http.post(
        f"{base}/v1/oauth/clients",
        headers=tenant.headers,
        json={"name": "etl", "project": "default", "scopes": ["read", "write"], **body},
    )
    assert r.status_code == 201, r.text
    return r.json()


def test_client_credentials_token_on_the_rest_api(live_url, tenant, other_tenant) -> None:
    with httpx.Client(timeout=30) as http:
        svc = _service_account(http, live_url, tenant)
        token = http.post(
            f"{live_url}/oauth/token",
            data={"grant_type": "client_credentials"},
            auth=(svc["client_id"], svc["client_secret"]),
        )
        assert token.status_code == 200, token.text
        body = token.json()
        assert body["token_type"].lower() == "bearer" and "refresh_token" not in body
        auth = {"Authorization": f"Bearer {body['access_token']}"}
        put = http.post(
            f"{live_url}/v1/notes", headers=auth, json={"id": "cc", "content": "by a service"}
        )
        assert put.status_code in (200, 201), put.text
        assert http.get(f"{live_url}/v1/notes/cc", headers=tenant.headers).is_success
        # another tenant's key cannot see it; the token cannot reach the other tenant
        assert http.get(f"{live_url}/v1/notes/cc", headers=other_tenant.headers).status_code == 404
        # the token is a JWT whose kid is in the published JWKS
        header = json.loads(base64.urlsafe_b64decode(body["access_token"].split(".")[0] + "=="))
        kids = {k["kid"] for k in http.get(f"{live_url}/oauth/jwks").json()["keys"]}
        assert header["kid"] in kids and header["typ"] == "at+jwt"
        # a wrong secret is 401 invalid_client
        bad = http.post(
            f"{live_url}/oauth/token",
            data={"grant_type": "client_credentials"},
            auth=(svc["client_id"], "wrong"),
        )
        assert bad.status_code == 401 and bad.json()["error"] == "invalid_client"
        # revoking the service account ends its tokens at once
        gone = http.delete(
            f"{live_url}/v1/oauth/clients/{svc['client_id']}", headers=tenant.headers
        )
        assert gone.status_code == 200
        r = http.get(f"{live_url}/v1/notes/cc", headers=auth)
        assert r.status_code == 401


def test_expired_and_forged_tokens_get_401(settings, tenant, monkeypatch) -> None:
    from app.main import create_app
    from app.oauth import tokens
    from tests.conftest import serving

    short = settings.model_copy(update={"oauth_access_token_seconds": 1})
    # no clock-skew allowance here (30 s in service), so the expiry shows in 2 s
    monkeypatch.setattr(tokens, "LEEWAY_S", 0)
    with serving(create_app(short)) as base, httpx.Client(timeout=30) as http:
        svc = _service_account(http, base, tenant, scopes=["read"])
        token = http.post(
            f"{base}/oauth/token",
            data={"grant_type": "client_credentials"},
            auth=(svc["client_id"], svc["client_secret"]),
        ).json()["access_token"]
        auth = {"Authorization": f"Bearer {token}"}
        assert http.get(f"{base}/v1/notes", headers=auth).status_code == 200
        # a token whose claims were changed no longer verifies
        head, claims, sig = token.split(".")
        decoded = json.loads(base64.urlsafe_b64decode(claims + "=="))
        decoded["scope"] = "read write admin"
        forged_claims = base64.urlsafe_b64encode(json.dumps(decoded).encode()).rstrip(b"=")
        forged = f"{head}.{forged_claims.decode()}.{sig}"
        r = http.get(f"{base}/v1/notes", headers={"Authorization": f"Bearer {forged}"})
        assert r.status_code == 401
        # an unsigned token ("alg": "none") is refused
        none_head = base64.urlsafe_b64encode(b'{"alg":"none","typ":"JWT"}').rstrip(b"=")
        r = http.get(
            f"{base}/v1/notes",
            headers={"Authorization": f"Bearer {none_head.decode()}.{claims}."},
        )
        assert r.status_code == 401
        time.sleep(2.1)  # past the expiry (whole seconds)
        r = http.get(f"{base}/v1/notes", headers=auth)
        assert r.status_code == 401 and "expired" in r.json()["error"]


async def test_discovery_documents(client) -> None:
    meta = (await client.get("/.well-known/oauth-authorization-server")).json()
    assert meta["issuer"] == "http://keepmem.test"
    assert meta["code_challenge_methods_supported"] == ["S256"]
    assert "client_credentials" in meta["grant_types_supported"]
    prm = (await client.get("/.well-known/oauth-protected-resource/mcp")).json()
    assert prm["resource"] == "http://keepmem.test/mcp"
    assert prm["authorization_servers"] == ["http://keepmem.test"]
    jwks = (await client.get("/oauth/jwks")).json()
    assert jwks["keys"] and all("d" not in k for k in jwks["keys"])  # public halves only


@pytest.mark.parametrize("path", ["/oauth/token", "/oauth/revoke", "/oauth/introspect"])
def test_oauth_endpoints_answer_garbage_with_oauth_errors(live_url, path) -> None:
    r = httpx.post(f"{live_url}{path}", data={"grant_type": "nonsense", "token": "x"})
    assert r.status_code in (400, 401)
    assert re.match(r"^[a-z_]+$", r.json()["error"])


async def test_oauth_over_plain_http_to_a_public_host_is_refused_clearly(client) -> None:
    r = await client.post("/oauth/token", data={"grant_type": "client_credentials"})
    assert r.status_code == 400 and r.json()["error"] == "insecure_transport"
    assert "KEEPMEM_PUBLIC_URL" in r.json()["error_description"]
