"""Full-text index per project: GIN over (tenant_id, project_id, fts).

With fts alone, a word's posting list spans every tenant, so a small
project's query also reads the matches of all the others; btree_gin lets the
same GIN index intersect the project's rows with the word's. Measured in
bench/search.py at 100k (1,000-note projects in a 200k-row table), together
with the other full-text changes of that commit: the text stage went from
25.0 to 22.8 ms (p50) — a small gain there.

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
