"""A project's timeline: notes in the order they happened.

find reads a strong hit's neighbours on the timeline (the note just before
and just after it) as its context: in a conversation, the answer is often
the turn after the one that matches the question. The order is
``created_at``, then the id in natural order (``turn-9`` before
``turn-10``), for notes stamped with the same time (one import, one session).
``keepmem_natural_key`` pads every run of digits to 20 places; PostgreSQL
here has no ICU collation that would sort numbers naturally. The function
only reshapes its argument and raises no data-dependent error, so it is
marked LEAKPROOF (as a superuser; see 0003): under row-level security a
comparison through it can then be an index condition, not a filter over
every later note.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-23
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(**_: object) -> None:
    op.execute(
        r"""
        CREATE FUNCTION keepmem_natural_key(id text)
        RETURNS text LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
            SELECT coalesce(string_agg(
                CASE WHEN m[1] ~ '^[0-9]' AND length(m[1]) < 20
                     THEN lpad(m[1], 20, '0') ELSE m[1] END, '' ORDER BY n), '')
            FROM regexp_matches(id, '([0-9]+|[^0-9]+)', 'g') WITH ORDINALITY AS r(m, n)
        $$
        """
    )
    op.execute(
        """
        DO $$
        BEGIN
            IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
                ALTER FUNCTION keepmem_natural_key(text) LEAKPROOF;
            ELSE
                RAISE WARNING 'keepmem: not a superuser, so find''s timeline context '
                    'reads more rows than it needs under row-level security; as a '
                    'superuser run: ALTER FUNCTION keepmem_natural_key(text) LEAKPROOF;';
            END IF;
        END
        $$
        """
    )
    op.execute(
        "CREATE INDEX ix_notes_timeline ON notes "
        "(tenant_id, project_id, created_at, keepmem_natural_key(id))"
    )


def downgrade(**_: object) -> None:
    op.execute("DROP INDEX IF EXISTS ix_notes_timeline")
    op.execute("DROP FUNCTION IF EXISTS keepmem_natural_key(text)")
