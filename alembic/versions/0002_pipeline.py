"""Background pipeline: job claims with heartbeats, fair dispatch index,
task results.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade(**_: object) -> None:
    op.execute("ALTER TABLE jobs ADD COLUMN claim_token uuid")
    op.execute("ALTER TABLE jobs ADD COLUMN heartbeat_at timestamptz")
    op.execute("ALTER TABLE jobs ADD COLUMN result jsonb")
    op.execute("ALTER TABLE jobs ADD COLUMN finished_at timestamptz")
    # Fair dispatch walks tenants with ready work, then each tenant's oldest jobs.
    op.execute(
        "CREATE INDEX ix_jobs_pending_tenant ON jobs (tenant_id, priority, id) "
        "WHERE status = 'pending'"
    )
    op.execute(
        "CREATE INDEX ix_jobs_inflight ON jobs (heartbeat_at) "
        "WHERE status IN ('dispatched', 'running')"
    )
    op.execute("CREATE INDEX ix_jobs_status ON jobs (tenant_id, status, id)")
    op.execute("CREATE INDEX ix_embeddings_model ON embeddings (model)")


def downgrade(**_: object) -> None:
    op.execute("DROP INDEX IF EXISTS ix_embeddings_model")
    op.execute("DROP INDEX IF EXISTS ix_jobs_status")
    op.execute("DROP INDEX IF EXISTS ix_jobs_inflight")
    op.execute("DROP INDEX IF EXISTS ix_jobs_pending_tenant")
    for column in ("finished_at", "result", "heartbeat_at", "claim_token"):
        op.execute(f"ALTER TABLE jobs DROP COLUMN IF EXISTS {column}")
