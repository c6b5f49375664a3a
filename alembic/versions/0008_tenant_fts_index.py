"""Full-text index per project: GIN over (tenant_id, project_id, fts).

With fts alone, a word's posting list spans every tenant, and a small
project's query read (and threw away) the matches of all the others
(measured: 25 ms for a 1,000-note project in a 200k-note table). btree_gin
lets the same GIN index intersect the project's rows with the word's.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-22
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(**_: object) -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS btree_gin")
    op.execute("DROP INDEX IF EXISTS ix_notes_fts")
    op.execute("CREATE INDEX ix_notes_fts ON notes USING gin (tenant_id, project_id, fts)")


def downgrade(**_: object) -> None:
    op.execute("DROP INDEX IF EXISTS ix_notes_fts")
    op.execute("CREATE INDEX ix_notes_fts ON notes USING gin (fts)")
