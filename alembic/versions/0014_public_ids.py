"""The audit log and the change feed get random public ids, as jobs did (0009).

``audit_log.id`` and ``changes.id`` are identity sequences shared by every
tenant: showing them (audit entry ids and cursors, event ids, the export's
cursors and ``outbox_id``, webhook payloads) let a tenant count the other
tenants' activity between two of its own rows. ``public_id`` (a random UUID,
unique per tenant) is what the API shows and what its cursors carry; a
cursor is resolved to the row's ``id`` inside the caller's tenant, and
``id`` still orders everything.

The application role keeps only INSERT on ``audit_log`` (0012): adding a
column is the owner's DDL (a table rewrite, no UPDATE, so no trigger, rule
or privilege of the append-only log is involved), and existing rows get
their random ids from the column default as it is added.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels = None
depends_on = None

TABLES = {"audit_log": "ix_audit_public_id", "changes": "ix_changes_public_id"}


def upgrade(**_: object) -> None:
    for table, index in TABLES.items():
        op.execute(
            f"ALTER TABLE {table} ADD COLUMN public_id uuid NOT NULL DEFAULT gen_random_uuid()"
        )
        op.execute(f"CREATE UNIQUE INDEX {index} ON {table} (tenant_id, public_id)")


def downgrade(**_: object) -> None:
    for table, index in TABLES.items():
        op.execute(f"DROP INDEX IF EXISTS {index}")
        op.execute(f"ALTER TABLE {table} DROP COLUMN IF EXISTS public_id")
