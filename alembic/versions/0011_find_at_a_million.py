"""find at a million notes: a project's average note length, and the
planner told that a project belongs to one tenant.

find's full-text stage (BM25) needs each project's average note length; it
was sampled from a thousand notes on every question. The worker's recount of
a project's words (``term_stats``) now records it next to the note count.

Every query names both ``tenant_id`` and ``project_id``. Without extended
statistics the planner multiplies their selectivities as if independent, so
a small tenant's project is estimated at one row where it has hundreds, and
find's vector stage joined notes by scanning the whole project once per
vector (8 ms instead of 0.3 ms for 200 notes, bench/search.py). Functional
dependency statistics fix the estimate.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


TABLES = ("notes", "embeddings", "parts", "note_versions", "jobs")


def upgrade(**_: object) -> None:
    op.add_column("projects", sa.Column("term_stats_avgdl", sa.Float(), nullable=True))
    for table in TABLES:
        op.execute(
            f"CREATE STATISTICS st_{table}_project (dependencies, ndistinct) "
            f"ON tenant_id, project_id FROM {table}"
        )
        op.execute(f"ANALYZE {table}")


def downgrade(**_: object) -> None:
    for table in TABLES:
        op.execute(f"DROP STATISTICS IF EXISTS st_{table}_project")
    op.drop_column("projects", "term_stats_avgdl")
