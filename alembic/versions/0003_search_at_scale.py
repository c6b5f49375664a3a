"""Full text at scale: indexes usable under row-level security, and each
big project's common terms.

1. With RLS on, Postgres applies the policy before any user condition whose
operator is not LEAKPROOF, so ``fts @@ query`` and ``tag_index @> terms`` were
checked row by row over the whole tenant instead of through their GIN
indexes (measured: a 20k-note project's full-text stage scanned every row).
Both operators only compare their arguments and raise no data-dependent
error, so they are marked LEAKPROOF, which only a superuser may do. Without
one (some managed services), the migration says so and search stays correct,
only slower; an operator can run the two statements below later. The queries
always filter by tenant explicitly; RLS stays the second line of defence.

2. ``term_stats``: the lexemes found in many notes of a big project (computed
by the worker from the project's own notes, never across tenants). A long
question's common words would match, and make the full-text stage rank, a
large part of such a project; find leaves them out (Lucene's "common terms").

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FUNCTIONS = ("ts_match_vq(tsvector, tsquery)", "arraycontains(anyarray, anyarray)")


def _set(leakproof: bool) -> None:
    word = "LEAKPROOF" if leakproof else "NOT LEAKPROOF"
    statements = " ".join(f"ALTER FUNCTION pg_catalog.{f} {word};" for f in FUNCTIONS)
    op.execute(
        f"""
        DO $$
        BEGIN
            IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
                {statements}
            ELSE
                RAISE WARNING 'keepmem: not a superuser, so full-text and tag '
                    'filters cannot use their indexes under row-level security; '
                    'as a superuser run: {statements}';
            END IF;
        END
        $$
        """
    )


def upgrade(app_role: str = "keepmem_app", **_: object) -> None:
    _set(True)
    op.execute(
        """
        CREATE TABLE term_stats (
            tenant_id uuid NOT NULL,
            project_id uuid NOT NULL,
            lexeme text NOT NULL,
            ndoc integer NOT NULL,
            PRIMARY KEY (tenant_id, project_id, lexeme),
            FOREIGN KEY (tenant_id, project_id) REFERENCES projects (tenant_id, id)
                ON DELETE CASCADE
        )
        """
    )
    op.execute("ALTER TABLE projects ADD COLUMN term_stats_at timestamptz")
    op.execute("ALTER TABLE projects ADD COLUMN term_stats_notes integer")
    op.execute("ALTER TABLE term_stats ENABLE ROW LEVEL SECURITY")
    op.execute(
        "CREATE POLICY tenant_isolation ON term_stats USING "
        "(tenant_id = keepmem_current_tenant() OR keepmem_is_system()) WITH CHECK "
        "(tenant_id = keepmem_current_tenant() OR keepmem_is_system())"
    )
    op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON term_stats TO {app_role}")


def downgrade(**_: object) -> None:
    op.execute("DROP TABLE IF EXISTS term_stats")
    op.execute("ALTER TABLE projects DROP COLUMN IF EXISTS term_stats_notes")
    op.execute("ALTER TABLE projects DROP COLUMN IF EXISTS term_stats_at")
    _set(False)
