"""Wire schemas of OAuth: a client's registration metadata (RFC 7591) and a
tenant's OAuth administration."""

from __future__ import annotations

import ipaddress
import re
import uuid
from datetime import datetime
from typing import Annotated, Any, Literal
from urllib.parse import SplitResult, urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from app.auth.schemas import Permission
from app.kit.tags import terms_as_tags
from app.models import OAuthClient, OAuthIssuer

TagScope = dict[str, str]
TAGS_DESCRIPTION = (
    "Tag scope: the credential sees only notes carrying every one of these tags, "
    'and its writes are stamped with them (e.g. {"user": "alice"}).'
)


class OAuthErrorOut(BaseModel):
    error: str = Field(description="An RFC 6749 error code, e.g. invalid_grant.")
    error_description: str | None = None


SCOPE_LIST = r"^(read|write|admin)( (read|write|admin))*$"
MAX_REDIRECT_URIS = 10
MAX_URI_CHARS = 2000


def _url(value: str) -> SplitResult:
    if any(c.isspace() or not c.isprintable() for c in value):
        raise ValueError("must not contain spaces or control characters")
    parts = urlsplit(value)
    parts.port  # noqa: B018 - raises ValueError for a port that is not one
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ValueError("must be an absolute http(s) URL")
    if "#" in value:
        raise ValueError("must not contain a fragment")
    if parts.username is not None or parts.password is not None:
        raise ValueError("must not contain user information")
    return parts


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


#: Schemes a browser runs or reads locally: never a place to send a code.
_NOT_PRIVATE_USE = frozenset(
    ("javascript", "vbscript", "data", "file", "blob", "filesystem", "about", "ftp", "ws", "wss")
)
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]{0,63}$")


def _redirect_uri(value: str) -> str:
    """OAuth 2.1 §2.3.1 and §8.4.2: https, http to a loopback address (a
    native client's local listener, any port), or a native app's private-use
    scheme (RFC 8252 §7.1, e.g. ``cursor://...``, ``com.example.app:/cb``)."""
    scheme = value.split(":", 1)[0].lower() if ":" in value else ""
    if scheme in ("http", "https") or not scheme:
        parts = _url(value)
        if parts.scheme == "http" and not _loopback(parts.hostname or ""):
            raise ValueError(
                "must use https (http only on 127.0.0.1, [::1] or localhost), "
                "or a native app's private-use scheme"
            )
        return value
    if not _SCHEME.match(scheme) or scheme in _NOT_PRIVATE_USE:
        raise ValueError(f"scheme {scheme[:40]!r} cannot receive an authorization code")
    if any(c.isspace() or not c.isprintable() for c in value):
        raise ValueError("must not contain spaces or control characters")
    parts = urlsplit(value)
    if "#" in value:
        raise ValueError("must not contain a fragment")
    if parts.username is not None or parts.password is not None:
        raise ValueError("must not contain user information")
    return value


def _web_page(value: str) -> str:
    _url(value)
    return value


_RedirectUri = Annotated[
    str, Field(min_length=1, max_length=MAX_URI_CHARS), AfterValidator(_redirect_uri)
]
_Uri = Annotated[str, Field(min_length=1, max_length=MAX_URI_CHARS), AfterValidator(_web_page)]
_Short = Annotated[str, Field(min_length=1, max_length=200)]
_GrantType = Literal["authorization_code", "refresh_token"]
_ResponseType = Literal["code"]


class ClientMetadata(BaseModel):
    """Dynamic client registration (RFC 7591 §2) as keepmem accepts it:
    the authorization-code flow only, https redirect URIs (http only on a
    loopback address; native apps' private-use schemes), every value of its
    JSON type. Members keepmem does not use (``jwks``, ``software_statement``,
    anything unknown) are dropped."""

    model_config = ConfigDict(strict=True, extra="ignore")

    redirect_uris: list[_RedirectUri] = Field(
        min_length=1,
        max_length=MAX_REDIRECT_URIS,
        description="Where codes are sent: https, http on 127.0.0.1, [::1] or localhost, "
        "or a native app's private-use scheme (RFC 8252); no fragment, no user info.",
    )
    client_name: _Short | None = Field(
        default=None, description="Shown to the person on the consent page."
    )
    token_endpoint_auth_method: Literal["client_secret_basic", "client_secret_post", "none"] = (
        "client_secret_basic"
    )
    grant_types: list[_GrantType] = Field(
        default_factory=lambda: list[_GrantType](["authorization_code"]),
        min_length=1,
        max_length=2,
        description="Client credentials belong to a tenant's service accounts.",
    )
    response_types: list[_ResponseType] = Field(
        default_factory=lambda: list[_ResponseType](["code"]), min_length=1, max_length=1
    )
    scope: Annotated[str, Field(max_length=200, pattern=SCOPE_LIST)] | None = None
    client_uri: _Uri | None = None
    logo_uri: _Uri | None = None
    tos_uri: _Uri | None = None
    policy_uri: _Uri | None = None
    contacts: list[Annotated[str, Field(min_length=1, max_length=320)]] | None = Field(
        default=None, max_length=10
    )
    software_id: _Short | None = None
    software_version: _Short | None = None


class ClientCreate(BaseModel):
    name: str = Field(min_length=1, max_length=200, description="What the service account is for.")
    project: str | None = Field(
        default=None, description="Project it is locked to (default: the request's project)."
    )
    scopes: list[Permission] = Field(
        default_factory=lambda: list[Permission](["read"]), min_length=1, max_length=3
    )
    tags: TagScope = Field(default_factory=dict, max_length=16, description=TAGS_DESCRIPTION)


class ClientOut(BaseModel):
    client_id: str
    name: str
    project_id: uuid.UUID | None
    project: str | None = None
    scopes: list[str]
    tags: TagScope
    created_at: datetime
    revoked_at: datetime | None

    @classmethod
    def of(cls, row: OAuthClient, project: str | None = None) -> ClientOut:
        return cls(
            client_id=row.client_id,
            name=str(row.client_metadata.get("client_name", "")),
            project_id=row.project_id,
            project=project,
            scopes=list(row.scopes),
            tags=terms_as_tags(row.tag_scope),
            created_at=row.created_at,
            revoked_at=row.revoked_at,
        )


class ClientCreated(ClientOut):
    client_secret: str = Field(description="Shown once: store it now.")


class ClientList(BaseModel):
    clients: list[ClientOut]


class IssuerCreate(BaseModel):
    issuer: str = Field(min_length=1, max_length=500, description="The tokens' `iss`.")
    audience: str = Field(
        min_length=1, max_length=500, description="The `aud` the tokens must carry for keepmem."
    )
    jwks: dict[str, Any] = Field(description="The issuer's JSON Web Key Set (public keys).")
    project_claim: str | None = Field(
        default=None, max_length=100, description="Claim naming the project (else the default)."
    )
    default_project: str = Field(default="default", max_length=63)
    scope_claim: str = Field(default="scope", max_length=100)
    default_scopes: list[Permission] = Field(
        default_factory=lambda: list[Permission](["read"]), max_length=3
    )
    tag_claims: dict[str, str] = Field(
        default_factory=dict,
        max_length=16,
        description='Tag scope from claims: tag key -> claim name (e.g. {"user": "email"}).',
    )


class IssuerOut(BaseModel):
    id: uuid.UUID
    issuer: str
    audience: str
    project_claim: str | None
    default_project: str
    scope_claim: str
    default_scopes: list[str]
    tag_claims: dict[str, str]
    created_at: datetime

    @classmethod
    def of(cls, row: OAuthIssuer) -> IssuerOut:
        return cls(
            id=row.id,
            issuer=row.issuer,
            audience=row.audience,
            project_claim=row.project_claim,
            default_project=row.default_project,
            scope_claim=row.scope_claim,
            default_scopes=list(row.default_scopes),
            tag_claims=dict(row.tag_claims),
            created_at=row.created_at,
        )


class IssuerList(BaseModel):
    issuers: list[IssuerOut]
