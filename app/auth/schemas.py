"""Wire schemas for API keys and tenants."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from app.kit.tags import terms_as_tags
from app.models import ApiKey, Tenant
from app.tenancy import Scope
from app.wire import not_text

Permission = Literal["read", "write", "admin"]


class KeyCreate(BaseModel):
    name: str = Field(
        description="What the key is for.", examples=["ci"], min_length=1, max_length=200
    )
    scopes: list[Permission] = Field(
        default_factory=lambda: list[Permission](["read", "write"]),
        min_length=1,
        max_length=3,
        description="Any of read, write, admin.",
    )
    expires_at: datetime | None = Field(default=None, description="Optional expiry (ISO-8601).")


class KeyOut(BaseModel):
    id: uuid.UUID
    tenant_id: uuid.UUID
    name: str
    prefix: str = Field(description="Visible start of the key, to tell keys apart.")
    scopes: list[str]
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None
    project_id: uuid.UUID | None = Field(
        default=None, description="The one project a narrowed key may use."
    )
    tags: dict[str, str] = Field(
        default_factory=dict, description="Tag scope: the key sees only notes with these tags."
    )
    parent: str | None = Field(
        default=None, description="The credential this key was narrowed from (it dies with it)."
    )

    @classmethod
    def of(cls, row: ApiKey) -> KeyOut:
        return cls(
            project_id=row.project_id,
            tags=terms_as_tags(row.tag_scope or []),
            parent=row.parent,
            id=row.id,
            tenant_id=row.tenant_id,
            name=row.name,
            prefix=row.prefix,
            scopes=list(row.scopes),
            created_at=row.created_at,
            expires_at=row.expires_at,
            revoked_at=row.revoked_at,
            last_used_at=row.last_used_at,
        )


class KeyNarrow(BaseModel):
    name: str = Field(min_length=1, max_length=200, description="What the key is for.")
    scopes: list[Permission] | None = Field(
        default=None,
        min_length=1,
        max_length=3,
        description="A subset of the caller's scopes (default: all of them).",
    )
    tags: dict[str, str] = Field(
        default_factory=dict,
        max_length=16,
        description='Tag scope added to the caller\'s own (e.g. {"user": "alice"}).',
    )
    expires_in_seconds: int = Field(
        ge=1, le=90 * 86400, description="Lifetime; never past the caller's own expiry."
    )

    _whole = field_validator("expires_in_seconds", mode="before")(not_text)


class KeyCreated(KeyOut):
    key: str = Field(description="The full key. Shown once: store it now.")


class KeyList(BaseModel):
    keys: list[KeyOut]


class TenantCreate(BaseModel):
    name: str = Field(
        description="Unique tenant name.", examples=["acme"], min_length=1, max_length=200
    )


class TenantOut(BaseModel):
    id: uuid.UUID
    name: str
    created_at: datetime
    disabled_at: datetime | None

    @classmethod
    def of(cls, row: Tenant) -> TenantOut:
        return cls(id=row.id, name=row.name, created_at=row.created_at, disabled_at=row.disabled_at)


class TenantCreated(BaseModel):
    tenant: TenantOut
    api_key: KeyCreated


class TenantList(BaseModel):
    tenants: list[TenantOut]


class WhoAmI(BaseModel):
    tenant_id: uuid.UUID
    credential: str = Field(description='"key:<id>", "grant:<id>" or "oidc:<issuer>:<subject>".')
    key_id: uuid.UUID | None = None
    scopes: list[str] = Field(description="read, write, admin.")
    project: str = Field(description="The project this request worked in.")
    project_locked: bool = Field(description="Whether the credential may use only this project.")
    tags: dict[str, str] = Field(
        default_factory=dict, description="Tag scope: only notes with these tags are visible."
    )
    expires_at: datetime | None = None

    @classmethod
    def of(cls, scope: Scope) -> WhoAmI:
        return cls(
            tenant_id=scope.tenant_id,
            credential=scope.credential,
            key_id=scope.key_id,
            scopes=sorted(scope.permissions),
            project=scope.project_slug,
            project_locked=scope.project_lock is not None,
            tags=terms_as_tags(list(scope.tag_terms)),
            expires_at=scope.expires_at,
        )
