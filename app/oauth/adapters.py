"""authlib's view of keepmem: requests read before authlib runs, the
answer it gives, and client, code and token rows wrapped in the mixins its
grants call."""

from __future__ import annotations

import hashlib
import hmac
import uuid
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from authlib.oauth2.rfc6749 import (
    ClientMixin,
    JsonPayload,
    OAuth2Payload,
    OAuth2Request,
)
from authlib.oauth2.rfc9207 import IssuerParameter

from app.kit.timeutil import utcnow
from app.models import OAuthClient, OAuthCode, OAuthGrant
from app.tenancy import ALL_SCOPES

AUTH_METHODS = ["client_secret_basic", "client_secret_post", "none"]
PUBLIC_GRANTS = ("authorization_code", "refresh_token")


def digest(value: str) -> bytes:
    return hashlib.sha256(value.encode()).digest()


@dataclass(frozen=True, slots=True)
class Consent:
    """What a person allowed on the consent page (authlib's "user")."""

    tenant_id: uuid.UUID
    key_id: uuid.UUID | None
    project_id: uuid.UUID
    scopes: tuple[str, ...]
    tag_scope: tuple[str, ...]
    resource: str | None = None
    grant_id: uuid.UUID | None = None  # set when a refresh token is used

    def get_user_id(self) -> str:
        return str(self.key_id or self.tenant_id)


@dataclass(slots=True)
class Incoming:
    """An HTTP request, read before authlib runs (it cannot await)."""

    method: str
    url: str
    headers: Mapping[str, str]
    args: Mapping[str, list[str]] = field(default_factory=dict)
    form: Mapping[str, list[str]] = field(default_factory=dict)
    json: dict[str, Any] | None = None


@dataclass(slots=True)
class Answer:
    """What authlib answers: a status, a JSON body (or none) and headers."""

    status: int
    body: Any
    headers: list[tuple[str, str]]

    @property
    def location(self) -> str | None:
        return next((v for k, v in self.headers if k.lower() == "location"), None)

    @location.setter
    def location(self, value: str) -> None:
        self.headers = [(k, v) for k, v in self.headers if k.lower() != "location"]
        self.headers.append(("Location", value))


class IssuerParam(IssuerParameter):  # type: ignore[misc]
    """RFC 9207: the authorization response names its issuer."""

    def __init__(self, issuer: str) -> None:
        self.issuer = issuer

    def get_issuer(self) -> str:
        return self.issuer


class _Payload(OAuth2Payload):  # type: ignore[misc]
    def __init__(self, incoming: Incoming) -> None:
        merged: dict[str, list[str]] = defaultdict(list)
        for source in (incoming.args, incoming.form):
            for key, values in source.items():
                merged[key].extend(values)
        self._datalist = merged
        self._data = {key: values[0] for key, values in merged.items() if values}

    @property
    def data(self) -> dict[str, str]:
        return self._data

    @property
    def datalist(self) -> defaultdict[str, list[str]]:
        return defaultdict(list, self._datalist)


class HttpRequest(OAuth2Request):  # type: ignore[misc]
    def __init__(self, incoming: Incoming) -> None:
        super().__init__(method=incoming.method, uri=incoming.url, headers=incoming.headers)
        self.payload = _Payload(incoming)
        self._incoming = incoming

    @property
    def args(self) -> dict[str, str]:
        return {k: v[0] for k, v in self._incoming.args.items() if v}

    @property
    def form(self) -> dict[str, str]:
        return {k: v[0] for k, v in self._incoming.form.items() if v}


class JsonBody(JsonPayload):  # type: ignore[misc]
    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    @property
    def data(self) -> dict[str, Any]:
        return self._data


class Client(ClientMixin):  # type: ignore[misc]
    """A client row as authlib sees it."""

    def __init__(self, row: OAuthClient, server_secret: str) -> None:
        self.row = row
        self.client_id = row.client_id
        self._secret = server_secret
        meta = row.client_metadata
        self.redirect_uris: list[str] = list(meta.get("redirect_uris") or [])
        self.auth_method: str = meta.get("token_endpoint_auth_method", "client_secret_basic")
        self.grant_types: list[str] = list(meta.get("grant_types") or ["authorization_code"])

    @property
    def service_account(self) -> bool:
        return self.row.tenant_id is not None

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str | None:
        return self.redirect_uris[0] if self.redirect_uris else None

    def get_allowed_scope(self, scope: str | None) -> str:
        allowed = list(self.row.scopes) if self.service_account else list(ALL_SCOPES)
        if not scope:
            return " ".join(allowed)
        return " ".join(s for s in scope.split() if s in allowed)

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri in self.redirect_uris

    def check_client_secret(self, client_secret: str) -> bool:
        if self.row.secret_hash is None:
            return False
        presented = hmac.new(self._secret.encode(), client_secret.encode(), "sha256").digest()
        return hmac.compare_digest(presented, self.row.secret_hash)

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method == self.auth_method

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code" and not self.service_account

    def check_grant_type(self, grant_type: str) -> bool:
        if self.row.revoked_at is not None:
            return False
        if self.service_account:
            return grant_type == "client_credentials"
        return grant_type in PUBLIC_GRANTS and grant_type in self.grant_types


def hash_secret(server_secret: str, secret: str) -> bytes:
    return hmac.new(server_secret.encode(), secret.encode(), "sha256").digest()


class Code:
    """An authorization code row as authlib sees it."""

    def __init__(self, row: OAuthCode) -> None:
        self.row = row
        self.code_challenge = row.code_challenge
        self.code_challenge_method = row.code_challenge_method

    def get_redirect_uri(self) -> str | None:
        return self.row.redirect_uri

    def get_scope(self) -> str:
        return " ".join(self.row.scopes)

    def get_nonce(self) -> str | None:
        return self.row.nonce

    def get_auth_time(self) -> None:
        return None


class GrantToken:
    """A grant (refresh token, or the grant behind an access token)."""

    def __init__(self, row: OAuthGrant, *, revoked: bool = False) -> None:
        self.row = row
        self.revoked = revoked or row.revoked_at is not None

    def check_client(self, client: Client) -> bool:
        return bool(client.client_id == self.row.client_id)

    def get_scope(self) -> str:
        return " ".join(self.row.scopes)

    def get_expires_in(self) -> int:
        return max(0, int((self.row.access_expires_at - utcnow()).total_seconds()))

    def is_expired(self) -> bool:
        expiry = self.row.refresh_expires_at or self.row.access_expires_at
        return bool(expiry <= utcnow())

    def is_revoked(self) -> bool:
        return self.revoked

    def get_user(self) -> Consent:
        return consent_of(self.row)

    def get_client(self) -> None:
        return None


def consent_of(row: OAuthGrant) -> Consent:
    return Consent(
        tenant_id=row.tenant_id,
        key_id=row.key_id,
        project_id=row.project_id,
        scopes=tuple(row.scopes),
        tag_scope=tuple(row.tag_scope),
        resource=row.resource,
        grant_id=row.id,
    )
