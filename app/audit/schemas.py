"""Wire schemas of the audit trail (``GET /v1/audit``)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field


class AuditEntry(BaseModel):
    id: str = Field(description="Random, unique within the tenant (not a sequence number).")
    at: datetime
    actor: str = Field(description="key:<id>, grant:<id>, oidc:<issuer>:<subject>, admin, cli")
    action: str = Field(description="e.g. api.put_note, key.create, oauth.consent, auth.refused")
    target: str | None = Field(description="The note or object acted on, when there is one.")
    project_id: uuid.UUID | None
    outcome: str = Field(description="ok, or error:<code>")
    request_id: str | None
    detail: dict[str, Any] = Field(description="Ids, names and counts; never note content.")


class AuditPage(BaseModel):
    entries: list[AuditEntry]
    next_cursor: str | None = Field(
        description="Pass as `cursor` for older entries (opaque; null on the last page)."
    )
