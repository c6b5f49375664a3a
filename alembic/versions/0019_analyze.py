"""Planner statistics refreshed after large writes (issue 36).

Autovacuum analyzes a table once 10 % of it changed: at a million notes an
import of 20,000 leaves the planner with the old statistics, and one find
was planned at 50 ms instead of 6 ms until autovacuum came round. The
workers now ask for an ANALYZE of the note tables that changed by more than
a threshold since their last analyze (``app.pipeline.planner_stats``).

Only a table's owner may analyze it (the application role's ANALYZE is
skipped with a warning), so ``keepmem_refresh_planner_stats`` runs as the
owner (SECURITY DEFINER) over a fixed list of tables: one caller at a time
across the service (an advisory lock; the others skip the round), each
table at most once per interval (a recent autovacuum analyze counts).

Revision ID: 0019
Revises: 0018
"""

from __future__ import annotations

from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels = None
depends_on = None

# The tables find and the reads plan over, that grow with the notes (jobs
# and the change feed churn, and are read by index: autovacuum keeps them).
TABLES = (
    "notes",
    "note_versions",
    "parts",
    "embeddings",
    "edges",
    "entities",
    "mentions",
    "relations",
    "term_stats",
    "note_texts",
    "citations",
)
FUNCTION = "keepmem_refresh_planner_stats(bigint, double precision)"


def upgrade(app_role: str = "keepmem_app", **_: object) -> None:
    tables = ", ".join(f"'{t}'" for t in TABLES)
    op.execute(
        f"""
        CREATE FUNCTION keepmem_refresh_planner_stats(
                p_min_rows bigint, p_interval_s double precision)
            RETURNS SETOF text
            LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp
            AS $$
            DECLARE
                t text;
            BEGIN
                IF NOT pg_try_advisory_xact_lock(hashtextextended('keepmem.planner_stats', 0)) THEN
                    RETURN;  -- another worker is at it
                END IF;
                -- the counts as they are now, not as first read in this transaction
                PERFORM pg_stat_clear_snapshot();
                FOR t IN
                    SELECT s.relname FROM pg_stat_user_tables s
                     WHERE s.schemaname = 'public'
                       AND s.relname IN ({tables})
                       AND s.n_mod_since_analyze >= greatest(p_min_rows, 1)
                       AND coalesce(greatest(s.last_analyze, s.last_autoanalyze), '-infinity')
                           < clock_timestamp() - make_interval(secs => greatest(p_interval_s, 1))
                     ORDER BY s.n_mod_since_analyze DESC
                LOOP
                    EXECUTE format('ANALYZE %I', t);
                    RETURN NEXT t;
                END LOOP;
            END
            $$
        """
    )
    op.execute(f"REVOKE ALL ON FUNCTION {FUNCTION} FROM PUBLIC")
    op.execute(f"GRANT EXECUTE ON FUNCTION {FUNCTION} TO {app_role}")


def downgrade(app_role: str = "keepmem_app", **_: object) -> None:
    op.execute(f"DROP FUNCTION IF EXISTS {FUNCTION}")
