"""Extracted graph: entities, their mentions in notes, relations between them.

An entity is keyed per project by its kind and case-folded name
(``person:melanie``); mentions and relations point back at the note and the
character span they came from. Re-extraction of a note replaces its rows.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = {
    "entities": """
        CREATE TABLE entities (
            tenant_id uuid NOT NULL,
            project_id uuid NOT NULL,
            key text COLLATE "C" NOT NULL,
            name text NOT NULL,
            kind text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (tenant_id, project_id, key),
            FOREIGN KEY (tenant_id, project_id) REFERENCES projects (tenant_id, id)
                ON DELETE CASCADE
        )""",
    "mentions": """
        CREATE TABLE mentions (
            tenant_id uuid NOT NULL,
            project_id uuid NOT NULL,
            note_id text COLLATE "C" NOT NULL,
            entity_key text COLLATE "C" NOT NULL,
            span_start integer NOT NULL,
            span_end integer NOT NULL,
            PRIMARY KEY (tenant_id, project_id, note_id, entity_key, span_start),
            FOREIGN KEY (tenant_id, project_id, note_id)
                REFERENCES notes (tenant_id, project_id, id) ON DELETE CASCADE,
            FOREIGN KEY (tenant_id, project_id, entity_key)
                REFERENCES entities (tenant_id, project_id, key) ON DELETE CASCADE
        )""",
    "relations": """
        CREATE TABLE relations (
            tenant_id uuid NOT NULL,
            project_id uuid NOT NULL,
            note_id text COLLATE "C" NOT NULL,
            subject_key text COLLATE "C" NOT NULL,
            predicate text NOT NULL,
            object_key text COLLATE "C" NOT NULL,
            span_start integer NOT NULL,
            span_end integer NOT NULL,
            PRIMARY KEY (tenant_id, project_id, note_id, subject_key, predicate, object_key),
            FOREIGN KEY (tenant_id, project_id, note_id)
                REFERENCES notes (tenant_id, project_id, id) ON DELETE CASCADE,
            FOREIGN KEY (tenant_id, project_id, subject_key)
                REFERENCES entities (tenant_id, project_id, key) ON DELETE CASCADE,
            FOREIGN KEY (tenant_id, project_id, object_key)
                REFERENCES entities (tenant_id, project_id, key) ON DELETE CASCADE
        )""",
}


def upgrade(app_role: str = "keepmem_app", **_: object) -> None:
    for table, ddl in TABLES.items():
        op.execute(ddl)
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(
            f"CREATE POLICY tenant_isolation ON {table} USING "
            "(tenant_id = keepmem_current_tenant() OR keepmem_is_system()) WITH CHECK "
            "(tenant_id = keepmem_current_tenant() OR keepmem_is_system())"
        )
        op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO {app_role}")
    for name, table, column in (
        ("ix_mentions_entity", "mentions", "entity_key"),
        ("ix_relations_subject", "relations", "subject_key"),
        ("ix_relations_object", "relations", "object_key"),
    ):
        op.execute(f"CREATE INDEX {name} ON {table} (tenant_id, project_id, {column})")


def downgrade(**_: object) -> None:
    for table in ("relations", "mentions", "entities"):
        op.execute(f"DROP TABLE IF EXISTS {table}")
