"""Jobs get a random public id: the API never shows the row sequence.

The ``id`` column is one identity sequence shared by every tenant, so
exposing it let a tenant count other tenants' work between two of its own
jobs. ``public_id`` (random UUID, unique per tenant) is what the jobs and
tasks APIs show and accept; ``id`` stays the internal key workers use.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-23
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(**_: object) -> None:
    op.execute("ALTER TABLE jobs ADD COLUMN public_id uuid NOT NULL DEFAULT gen_random_uuid()")
    op.execute("CREATE UNIQUE INDEX ix_jobs_public_id ON jobs (tenant_id, public_id)")


def downgrade(**_: object) -> None:
    op.execute("DROP INDEX IF EXISTS ix_jobs_public_id")
    op.execute("ALTER TABLE jobs DROP COLUMN IF EXISTS public_id")
