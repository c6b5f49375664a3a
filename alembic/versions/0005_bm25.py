"""BM25 ranking for the full-text stage.

``keepmem_bm25(doc, lexemes, idfs, avgdl)`` scores a tsvector against the
question's lexemes (Okapi BM25, k1 = 1.2, b = 0.75): term frequency from the
lexeme's positions, inverse document frequency computed per project by the
caller, length normalised by the project's average. It replaced
``ts_rank_cd``, which has no notion of how rare a word is: on LoCoMo every
turn carries its speaker's name, and ts_rank_cd ranked by it.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(**_: object) -> None:
    op.execute(
        """
        CREATE FUNCTION keepmem_bm25(doc tsvector, lexemes text[], idfs float8[], avgdl float8)
        RETURNS float8 LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
            SELECT coalesce(sum(
                q.idf * (tf * 2.2) / (tf + 1.2 * (0.25 + 0.75 * length(doc) / greatest(avgdl, 1)))
            ), 0)
            FROM (SELECT u.lexeme, coalesce(cardinality(u.positions), 1)::float8 AS tf
                  FROM unnest(doc) u) d
            JOIN unnest(lexemes, idfs) AS q(lexeme, idf) ON q.lexeme = d.lexeme
        $$
        """
    )


def downgrade(**_: object) -> None:
    op.execute("DROP FUNCTION IF EXISTS keepmem_bm25(tsvector, text[], float8[], float8)")
