"""Images waiting for OCR (uploads whose pages or pictures have no text yet).

Only the images are kept, and only until their OCR job is done: uploaded
documents are read and sanitised in the request, so no original file (and no
secret in it) is stored.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(app_role: str = "keepmem_app", **_: object) -> None:
    op.execute(
        """
        CREATE TABLE blobs (
            tenant_id uuid NOT NULL,
            project_id uuid NOT NULL,
            note_id text COLLATE "C" NOT NULL,
            job_id bigint NOT NULL,
            seq integer NOT NULL,
            data bytea NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (tenant_id, project_id, job_id, seq),
            FOREIGN KEY (tenant_id, project_id) REFERENCES projects (tenant_id, id)
                ON DELETE CASCADE
        )
        """
    )
    op.execute("ALTER TABLE blobs ENABLE ROW LEVEL SECURITY")
    op.execute(
        "CREATE POLICY tenant_isolation ON blobs USING "
        "(tenant_id = keepmem_current_tenant() OR keepmem_is_system()) WITH CHECK "
        "(tenant_id = keepmem_current_tenant() OR keepmem_is_system())"
    )
    op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON blobs TO {app_role}")


def downgrade(**_: object) -> None:
    op.execute("DROP TABLE IF EXISTS blobs")
