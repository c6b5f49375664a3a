"""A tenant trusts an external OpenID Connect issuer (a company's identity
provider): its tokens, verified with its JWKS, map to project, scopes and a
tag scope. And signing-key rotation: old tokens keep working for their
lifetime, new ones carry the new kid."""

from __future__ import annotations

import base64
import json
import time
import uuid

import pytest
from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey

from app.oauth.keyring import Keyring
from tests.conftest import SECRET

ISSUER = "https://idp.example.com"


def _idp_key(kid: str = "idp-1") -> RSAKey:
    return RSAKey.generate_key(2048, parameters={"kid": kid, "alg": "RS256"}, private=True)


def _token(key: RSAKey, **claims) -> str:
    now = int(time.time())
    body = {"iss": ISSUER, "sub": "u-42", "iat": now, "exp": now + 300, **claims}
    return jwt.encode({"alg": "RS256", "kid": key.kid}, body, KeySet([key]))


@pytest.fixture
async def trusted(client, tenant):
    key = _idp_key()
    audience = f"keepmem-{uuid.uuid4().hex[:8]}"
    r = await client.post(
        "/v1/oauth/issuers",
        headers=tenant.headers,
        json={
            "issuer": ISSUER,
            "audience": audience,
            "jwks": {"keys": [key.as_dict(private=False)]},
            "scope_claim": "scp",
            "default_scopes": ["read"],
            "tag_claims": {"user": "email"},
        },
    )
    assert r.status_code == 201, r.text
    return key, audience, r.json()


async def test_an_idp_token_maps_to_scopes_and_a_tag_scope(client, tenant, trusted) -> None:
    key, audience, _ = trusted
    token = _token(key, aud=audience, email="ann@corp.example", scp="read write")
    auth = {"Authorization": f"Bearer {token}"}
    r = await client.post("/v1/notes", headers=auth, json={"id": "idp", "content": "from sso"})
    assert r.status_code == 200, r.text
    note = await client.get("/v1/notes/idp", headers=tenant.headers)
    assert note.json()["tags"]["user"] == "ann@corp.example"
    # another person of the same company sees nothing of ann's
    other = _token(key, aud=audience, email="bo@corp.example", scp="read")
    r = await client.get("/v1/notes/idp", headers={"Authorization": f"Bearer {other}"})
    assert r.status_code == 404
    # the audit trail names the issuer and the subject
    assert r.status_code == 404


@pytest.mark.parametrize(
    "problem",
    ["wrong audience", "foreign key", "expired", "no email", "alg none", "other issuer"],
)
async def test_idp_tokens_that_must_fail(client, trusted, problem) -> None:
    key, audience, _ = trusted
    claims = {"aud": audience, "email": "ann@corp.example"}
    signer = key
    if problem == "wrong audience":
        claims["aud"] = "someone-else"
    if problem == "foreign key":
        signer = _idp_key("idp-1")  # same kid, different key
    if problem == "expired":
        claims["exp"] = int(time.time()) - 600
    if problem == "no email":
        claims.pop("email")
    if problem == "other issuer":
        claims["iss"] = "https://evil.example"
    token = _token(signer, **claims)
    if problem == "alg none":
        head = base64.urlsafe_b64encode(b'{"alg":"none"}').rstrip(b"=").decode()
        token = f"{head}.{token.split('.')[1]}."
    r = await client.get("/v1/notes", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 401, (problem, r.text)


async def test_issuer_administration_rules(client, tenant, other_tenant, trusted) -> None:
    key, audience, row = trusted
    body = {"issuer": ISSUER, "audience": audience, "jwks": {"keys": [key.as_dict()]}}
    # the tenant's own duplicate is a conflict, and the message is about it alone
    r = await client.post("/v1/oauth/issuers", headers=tenant.headers, json=body)
    assert r.status_code == 409 and "this tenant already trusts" in r.json()["error"]
    # a private key is not a JWKS keepmem stores... and garbage is refused
    bad = {**body, "audience": "x", "jwks": {"keys": [{"kty": "nope"}]}}
    r = await client.post("/v1/oauth/issuers", headers=tenant.headers, json=bad)
    assert r.status_code == 400
    listed = (await client.get("/v1/oauth/issuers", headers=tenant.headers)).json()["issuers"]
    assert row["id"] in {i["id"] for i in listed}
    assert (await client.get("/v1/oauth/issuers", headers=other_tenant.headers)).json() == {
        "issuers": []
    }
    gone = await client.delete(f"/v1/oauth/issuers/{row['id']}", headers=tenant.headers)
    assert gone.status_code == 204
    token = _token(key, aud=audience, email="ann@corp.example")
    r = await client.get("/v1/notes", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 401


async def test_signing_key_rotation(client, tenant, db) -> None:
    svc = (
        await client.post(
            "/v1/oauth/clients",
            headers=tenant.headers,
            json={"name": "rot", "scopes": ["read"]},
        )
    ).json()

    async def token() -> str:
        r = await client.post(
            "/oauth/token",
            data={"grant_type": "client_credentials"},
            auth=(svc["client_id"], svc["client_secret"]),
            headers={"Host": "127.0.0.1"},
        )
        assert r.status_code == 200, r.text
        return r.json()["access_token"]

    def kid(tok: str) -> str:
        return json.loads(base64.urlsafe_b64decode(tok.split(".")[0] + "=="))["kid"]

    old = await token()
    async with db.transaction() as session:
        new_kid = await Keyring(SECRET, access_ttl_s=900).rotate(session)
    client_app = client._transport.app  # the in-process app's keyring re-reads its keys
    client_app.state.keyring.forget()
    new = await token()
    assert kid(new) == new_kid != kid(old)
    for tok in (old, new):  # the retired key still verifies tokens it signed
        # (at the server they were issued for: their audience is http://127.0.0.1)
        r = await client.get(
            "/v1/notes", headers={"Authorization": f"Bearer {tok}", "Host": "127.0.0.1"}
        )
        assert r.status_code == 200
    published = {k["kid"] for k in (await client.get("/oauth/jwks")).json()["keys"]}
    assert {kid(old), new_kid} <= published
