"""keepmem's OAuth 2.1 authorization server, on authlib's.

authlib's grants and endpoints are synchronous; keepmem's database is not.
Each OAuth request runs authlib in a worker thread (``anyio.to_thread``) and
authlib's storage callbacks hop back to the event loop
(``anyio.from_thread``) to use the request's own database session, one call
at a time, so the whole exchange is one transaction.

Grants: authorization code with PKCE (S256, required), refresh token
(rotated on every use), client credentials (a tenant's service accounts).
Endpoints: dynamic client registration (RFC 7591), revocation (RFC 7009),
introspection (RFC 7662). Access tokens are RFC 9068 JWTs signed by the
keyring, carrying ``gid``: the grant row that revocation marks.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import anyio.from_thread
from authlib.oauth2.rfc6749 import AuthorizationServer, JsonRequest, OAuth2Request, grants
from authlib.oauth2.rfc6749.errors import InvalidRequestError
from authlib.oauth2.rfc7009 import RevocationEndpoint
from authlib.oauth2.rfc7591 import ClientRegistrationEndpoint
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oauth2.rfc7662 import IntrospectionEndpoint
from authlib.oauth2.rfc9068 import JWTBearerTokenGenerator
from joserfc.jwk import KeySet
from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import Unauthorized
from app.kit.timeutil import utcnow
from app.models import OAuthClient, OAuthCode, OAuthGrant
from app.oauth import repository as repo
from app.oauth import tokens
from app.oauth.adapters import (
    AUTH_METHODS,
    PUBLIC_GRANTS,
    Answer,
    Client,
    Code,
    Consent,
    GrantToken,
    HttpRequest,
    Incoming,
    IssuerParam,
    JsonBody,
    digest,
    hash_secret,
)
from app.oauth.keyring import ALG, Keyring
from app.tenancy import ALL_SCOPES

T = TypeVar("T")
CODE_SECONDS = 120


@dataclass(frozen=True, slots=True)
class Event:
    """A token issued or revoked, for its tenant's audit trail."""

    action: str
    tenant_id: uuid.UUID
    client_id: str
    grant_id: uuid.UUID
    detail: dict[str, Any]


class Server(AuthorizationServer):  # type: ignore[misc]
    """One per OAuth request: it holds that request's session and issuer."""

    def __init__(
        self,
        session: AsyncSession,
        *,
        issuer: str,
        keyring: Keyring,
        server_secret: str,
        access_seconds: int,
        refresh_days: int,
        registration_open: bool,
        max_unused_clients: int,
    ) -> None:
        super().__init__(scopes_supported=list(ALL_SCOPES))
        self.session = session
        self.issuer = issuer
        self.keyring = keyring
        self.server_secret = server_secret
        self.access_seconds = access_seconds
        self.refresh_days = refresh_days
        self.registration_open = registration_open
        self.max_unused_clients = max_unused_clients
        self.pending_grant: uuid.UUID | None = None
        self.events: list[Event] = []  # for the tenants' audit trails
        self.signing_key: Any = None
        self.register_token_generator("default", _Generator(self))
        self.register_grant(CodeGrant, [CodeChallenge(required=True)])
        self.register_grant(_RefreshGrant)
        self.register_grant(_ClientCredentialsGrant)
        self.register_endpoint(_Revocation)
        self.register_endpoint(_Introspection)
        self.register_endpoint(_Registration())
        self.register_extension(IssuerParam(issuer))

    # -- the bridge to the event loop ----------------------------------------------

    def run(self, fn: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
        return anyio.from_thread.run(fn, *args)

    # -- authlib's framework hooks -------------------------------------------------

    def query_client(self, client_id: str) -> Client | None:
        row = self.run(repo.get_client, self.session, client_id)
        if row is None or row.revoked_at is not None:
            return None
        return Client(row, self.server_secret)

    def save_token(self, token: dict[str, Any], request: OAuth2Request) -> None:
        now = utcnow()
        access_expires = now + timedelta(seconds=int(token.get("expires_in", 0)))
        refresh = token.get("refresh_token")
        refresh_hash = digest(refresh) if refresh else None
        refresh_expires = now + timedelta(days=self.refresh_days) if refresh else None
        user: Consent | None = request.user
        grant_type = request.payload.grant_type or ""
        if user is not None and user.grant_id is not None:  # a refresh: same grant, new tokens
            self.run(
                _rotate, self.session, user.grant_id, refresh_hash, refresh_expires, access_expires
            )
            self.events.append(
                Event("oauth.token", user.tenant_id, request.client.client_id, user.grant_id,
                      {"grant_type": grant_type})
            )  # fmt: skip
            return
        client: Client = request.client
        if user is None:  # client credentials: the service account's own terms
            row = client.row
            assert row.tenant_id is not None and row.project_id is not None
            user = Consent(
                tenant_id=row.tenant_id,
                key_id=None,
                project_id=row.project_id,
                scopes=tuple(token.get("scope", "").split()),
                tag_scope=tuple(row.tag_scope),
                resource=request.payload.data.get("resource"),
            )
        assert self.pending_grant is not None
        grant = OAuthGrant(
            id=self.pending_grant,
            tenant_id=user.tenant_id,
            client_id=client.client_id,
            key_id=user.key_id,
            project_id=user.project_id,
            scopes=list(token.get("scope", "").split()) or list(user.scopes),
            tag_scope=list(user.tag_scope),
            resource=user.resource,
            refresh_hash=refresh_hash,
            refresh_expires_at=refresh_expires,
            access_expires_at=access_expires,
        )
        self.run(repo.insert_grant, self.session, grant)
        self.run(repo.mark_client_used, self.session, client.client_id)
        self.events.append(
            Event("oauth.token", grant.tenant_id, grant.client_id, grant.id,
                  {"grant_type": grant_type, "scopes": grant.scopes})
        )  # fmt: skip

    def create_oauth2_request(self, request: Any) -> OAuth2Request:
        if isinstance(request, OAuth2Request):
            return request
        return HttpRequest(request)

    def create_json_request(self, request: Incoming) -> JsonRequest:
        json_request = JsonRequest(request.method, request.url, request.headers)
        json_request.payload = JsonBody(request.json or {})
        return json_request

    def handle_response(self, status: int, body: Any, headers: list[tuple[str, str]]) -> Answer:
        return Answer(status=status, body=body, headers=list(headers))

    def send_signal(self, name: str, *args: Any, **kwargs: Any) -> None:
        return None

    # -- tokens presented to revocation and introspection --------------------------

    def find_token(self, token_string: str) -> GrantToken | None:
        if tokens.looks_like_jwt(token_string):
            verifier = tokens.Verifier.of(self.keyring, self.issuer)
            grant_id = self.run(_grant_of_access_token, self.session, verifier, token_string)
            if grant_id is None:
                return None
            row = self.run(repo.get_grant, self.session, grant_id)
            return GrantToken(row) if row is not None else None
        row = self.run(repo.grant_by_refresh, self.session, digest(token_string))
        return GrantToken(row) if row is not None else None

    def metadata(self) -> dict[str, Any]:
        """RFC 8414 authorization-server metadata."""
        base = self.issuer.rstrip("/")
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{base}/oauth/authorize",
            "token_endpoint": f"{base}/oauth/token",
            "registration_endpoint": f"{base}/oauth/register",
            "revocation_endpoint": f"{base}/oauth/revoke",
            "introspection_endpoint": f"{base}/oauth/introspect",
            "jwks_uri": f"{base}/oauth/jwks",
            "scopes_supported": list(ALL_SCOPES),
            "response_types_supported": ["code"],
            "response_modes_supported": ["query"],
            "grant_types_supported": [*PUBLIC_GRANTS, "client_credentials"],
            "token_endpoint_auth_methods_supported": AUTH_METHODS,
            "revocation_endpoint_auth_methods_supported": AUTH_METHODS,
            "introspection_endpoint_auth_methods_supported": AUTH_METHODS,
            "code_challenge_methods_supported": ["S256"],
            "authorization_response_iss_parameter_supported": True,
        }


async def _rotate(
    session: AsyncSession,
    grant_id: uuid.UUID,
    refresh_hash: bytes | None,
    refresh_expires: Any,
    access_expires: Any,
) -> None:
    await repo.rotate_refresh(
        session,
        grant_id,
        refresh_hash=refresh_hash,
        refresh_expires_at=refresh_expires,
        access_expires_at=access_expires,
    )


async def _grant_of_access_token(
    session: AsyncSession, verifier: tokens.Verifier, token: str
) -> uuid.UUID | None:
    try:
        scope, _ = await tokens.authenticate(session, token, verifier)
    except Unauthorized:
        return None
    if not scope.credential.startswith("grant:"):
        return None
    return uuid.UUID(scope.credential.removeprefix("grant:"))


async def _signing_key(session: AsyncSession, keyring: Keyring) -> Any:
    return await keyring.signing_key(session)


class _Generator(JWTBearerTokenGenerator):  # type: ignore[misc]
    """RFC 9068 access tokens signed by the keyring; ``gid`` names the grant."""

    def __init__(self, server: Server) -> None:
        super().__init__(
            issuer=server.issuer,
            alg=ALG,
            refresh_token_generator=lambda *a, **k: secrets.token_urlsafe(48),
            expires_generator=lambda client, grant_type: server.access_seconds,
        )
        self.server = server

    def get_jwks(self) -> KeySet:
        """The signing key alone, as a key set: the token's header then names its ``kid``."""
        if self.server.signing_key is None:
            self.server.signing_key = self.server.run(
                _signing_key, self.server.session, self.server.keyring
            )
        return KeySet([self.server.signing_key])

    def get_audiences(self, client: Client, user: Consent | None, scope: str) -> str:
        resource = user.resource if user is not None else None
        return resource or self.server.issuer

    def get_extra_claims(
        self, client: Client, grant_type: str, user: Consent | None, scope: str
    ) -> dict[str, Any]:
        if user is not None and user.grant_id is not None:
            grant_id = user.grant_id
        else:
            grant_id = self.server.pending_grant = uuid.uuid4()
        return {"gid": str(grant_id)}


class CodeGrant(grants.AuthorizationCodeGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = AUTH_METHODS

    def save_authorization_code(self, code: str, request: OAuth2Request) -> None:
        server: Server = self.server
        consent: Consent = request.user
        data = request.payload.data
        if not data.get("code_challenge"):
            raise InvalidRequestError("PKCE is required: send code_challenge (S256)")
        row = OAuthCode(
            code_hash=digest(code),
            client_id=request.client.client_id,
            tenant_id=consent.tenant_id,
            key_id=consent.key_id,
            project_id=consent.project_id,
            scopes=list(consent.scopes),
            tag_scope=list(consent.tag_scope),
            redirect_uri=data.get("redirect_uri"),
            code_challenge=data.get("code_challenge"),
            code_challenge_method=data.get("code_challenge_method") or "S256",
            resource=data.get("resource"),
            nonce=data.get("nonce"),
            expires_at=utcnow() + timedelta(seconds=CODE_SECONDS),
        )
        server.run(repo.insert_code, server.session, row)

    def query_authorization_code(self, code: str, client: Client) -> Code | None:
        server: Server = self.server
        row = server.run(repo.take_code, server.session, digest(code), client.client_id)
        if row is None or row.expires_at <= utcnow():
            return None
        return Code(row)

    def delete_authorization_code(self, authorization_code: Code) -> None:
        return None  # taken (deleted) when it was read: a code works once

    def authenticate_user(self, authorization_code: Code) -> Consent:
        row = authorization_code.row
        resource = self.request.payload.data.get("resource") or row.resource
        return Consent(
            tenant_id=row.tenant_id,
            key_id=row.key_id,
            project_id=row.project_id,
            scopes=tuple(row.scopes),
            tag_scope=tuple(row.tag_scope),
            resource=resource,
        )


class _RefreshGrant(grants.RefreshTokenGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = AUTH_METHODS
    INCLUDE_NEW_REFRESH_TOKEN = True

    def authenticate_refresh_token(self, refresh_token: str) -> GrantToken | None:
        server: Server = self.server
        row = server.run(repo.grant_by_refresh, server.session, digest(refresh_token))
        if row is None:
            return None
        live = server.run(repo.resolve_grant, server.session, row.id)
        token = GrantToken(row, revoked=live is None or live.revoked or live.tenant_disabled)
        if token.is_revoked() or token.is_expired():
            return None
        return token

    def authenticate_user(self, refresh_token: GrantToken) -> Consent:
        return refresh_token.get_user()

    def revoke_old_credential(self, refresh_token: GrantToken) -> None:
        return None  # save_token replaced its hash: the old refresh token no longer matches


class _ClientCredentialsGrant(grants.ClientCredentialsGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post"]


class _Revocation(RevocationEndpoint):  # type: ignore[misc]
    CLIENT_AUTH_METHODS = AUTH_METHODS

    def query_token(self, token_string: str, token_type_hint: str | None) -> GrantToken | None:
        server: Server = self.server
        return server.find_token(token_string)

    def revoke_token(self, token: GrantToken, request: OAuth2Request) -> None:
        server: Server = self.server
        server.run(repo.revoke_grant, server.session, token.row.id)
        row = token.row
        server.events.append(Event("oauth.revoke", row.tenant_id, row.client_id, row.id, {}))


class _Introspection(IntrospectionEndpoint):  # type: ignore[misc]
    CLIENT_AUTH_METHODS = AUTH_METHODS

    def query_token(self, token_string: str, token_type_hint: str | None) -> GrantToken | None:
        server: Server = self.server
        token = server.find_token(token_string)
        if token is None:
            return None
        live = server.run(repo.resolve_grant, server.session, token.row.id)
        token.revoked = live is None or live.revoked or live.tenant_disabled
        return token

    def check_permission(self, token: GrantToken, client: Client, request: OAuth2Request) -> bool:
        return token.check_client(client)

    def introspect_token(self, token: GrantToken) -> dict[str, Any]:
        server: Server = self.server
        row = token.row
        return {
            "active": True,
            "client_id": row.client_id,
            "token_type": "Bearer",
            "scope": " ".join(row.scopes),
            "sub": str(row.key_id or row.client_id),
            "aud": row.resource or server.issuer,
            "iss": server.issuer,
            "exp": int(row.access_expires_at.timestamp()),
            "iat": int(row.created_at.timestamp()),
            "keepmem_project_id": str(row.project_id),
            "keepmem_tag_scope": list(row.tag_scope),
        }


class _Registration(ClientRegistrationEndpoint):  # type: ignore[misc]
    """Registration of public clients (no tenant) for the authorization-code
    flow; the metadata arrives checked (``app.oauth.registration``)."""

    def authenticate_token(self, request: Any) -> bool | None:
        server: Server = self.server
        return True if server.registration_open else None

    def get_server_metadata(self) -> dict[str, Any]:
        server: Server = self.server
        return server.metadata()

    def extract_client_metadata(self, request: Any) -> dict[str, Any]:
        return dict(request.payload.data)

    def generate_client_id(self, request: Any) -> str:
        return "mcp_" + secrets.token_urlsafe(18)

    def generate_client_secret(self, request: Any) -> str | None:
        if request.payload.data.get("token_endpoint_auth_method") == "none":
            return None
        return secrets.token_urlsafe(32)

    def generate_client_registration_info(
        self, client: OAuthClient, request: Any
    ) -> dict[str, Any]:
        """The metadata as registered, defaults included (RFC 7591 §3.2.1)."""
        meta = client.client_metadata
        return {
            "grant_types": meta["grant_types"],
            "token_endpoint_auth_method": meta["token_endpoint_auth_method"],
            "response_types": ["code"],
        }

    def save_client(
        self, client_info: dict[str, Any], client_metadata: dict[str, Any], request: Any
    ) -> OAuthClient:
        server: Server = self.server
        # Clients that never completed a grant are kept up to a cap: the
        # oldest make room (registration is open to anyone; a client in the
        # middle of its consent, holding a code, is kept).
        server.run(repo.prune_unused_clients, server.session, server.max_unused_clients - 1)
        secret = client_info.get("client_secret")
        row = OAuthClient(
            client_id=client_info["client_id"],
            tenant_id=None,
            secret_hash=hash_secret(server.server_secret, secret) if secret else None,
            client_metadata=client_metadata,
        )
        return server.run(repo.insert_client, server.session, row)
