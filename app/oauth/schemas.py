"""Wire schemas of a tenant's OAuth administration."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

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
