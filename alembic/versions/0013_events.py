"""live changes and webhooks.

* ``changes.kind``: what a change means to a person watching (put, tag,
  delete, move, revert, summary, embedding, parts, import, failed), or NULL
  for the bookkeeping rows keep's export reads but a watcher does not need
  (an archived version, dropped parts). ``GET /v1/events`` and webhooks
  stream the rows with a kind.
* ``ix_jobs_open``: the metrics' view of the outbox (open and dead jobs).
* ``webhooks``: a project's subscribers. The signing secret is stored sealed
  with the server secret (``app.sealing``); ``cursor`` is the last change
  handed to the job outbox as a delivery, so a delivery is made once per
  change even when workers restart.
"""

from __future__ import annotations

from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels = None
depends_on = None

TENANT_RULE = "(tenant_id = keepmem_current_tenant() OR keepmem_is_system())"


def upgrade(app_role: str = "keepmem_app", **_: object) -> None:
    op.execute("ALTER TABLE changes ADD COLUMN kind text")
    op.execute(
        """
        CREATE TABLE webhooks (
            tenant_id uuid NOT NULL,
            id uuid NOT NULL DEFAULT gen_random_uuid(),
            project_id uuid NOT NULL,
            url text NOT NULL,
            secret bytea NOT NULL,
            kinds text[] NOT NULL DEFAULT '{}',
            tags jsonb NOT NULL DEFAULT '{}'::jsonb,
            description text NOT NULL DEFAULT '',
            cursor bigint NOT NULL DEFAULT 0,
            active boolean NOT NULL DEFAULT true,
            created_by text NOT NULL DEFAULT '',
            created_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (tenant_id, id),
            FOREIGN KEY (tenant_id, project_id)
                REFERENCES projects (tenant_id, id) ON DELETE CASCADE
        )
        """
    )
    # The metrics count open and dead jobs by kind at every scrape; done
    # jobs (most rows) stay out of the index.
    op.execute(
        "CREATE INDEX ix_jobs_open ON jobs (kind, status, created_at) "
        "WHERE status IN ('pending', 'dispatched', 'running', 'dead')"
    )
    op.execute("CREATE INDEX ix_webhooks_project ON webhooks (tenant_id, project_id)")
    op.execute("ALTER TABLE webhooks ENABLE ROW LEVEL SECURITY")
    op.execute(
        f"CREATE POLICY tenant_isolation ON webhooks USING {TENANT_RULE} WITH CHECK {TENANT_RULE}"
    )
    # The scoped role (0012) holds exactly the app role's privileges.
    for role in (app_role, f"{app_role}_scoped"):
        op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON webhooks TO {role}")


def downgrade(app_role: str = "keepmem_app", **_: object) -> None:
    op.execute("DROP TABLE IF EXISTS webhooks")
    op.execute("DROP INDEX IF EXISTS ix_jobs_open")
    op.execute("ALTER TABLE changes DROP COLUMN IF EXISTS kind")
