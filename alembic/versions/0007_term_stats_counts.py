"""term_stats keeps every word of a big project found in at least 50 notes
(not only the common ones), so BM25's document frequencies are looked up
instead of counted per query; ``common`` marks the words find leaves out.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-22
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(**_: object) -> None:
    op.execute("ALTER TABLE term_stats ADD COLUMN common boolean NOT NULL DEFAULT true")


def downgrade(**_: object) -> None:
    op.execute("DELETE FROM term_stats WHERE NOT common")
    op.execute("ALTER TABLE term_stats DROP COLUMN IF EXISTS common")
