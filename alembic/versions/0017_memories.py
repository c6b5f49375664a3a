"""Memory formation: threads of messages, the extraction inbox and model
spend (``app.memories``).

* ``memory_threads``: one row per (project, thread id): the user and agent
  it belongs to, its message count (``next_seq``), how far extraction has
  read (``extracted_seq``) and its times. The messages are notes.
* ``memory_inbox``: messages extraction has not read yet (a crash
  mid-extraction loses none: they leave the inbox in the transaction that
  writes the memories made of them).
* ``memory_spend``: a project's extraction calls and tokens per UTC day
  (the budget of LLM extraction).

The memories themselves are notes too (tagged ``memory``), so find, versions,
export and the change feed see them.

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels = None
depends_on = None

TENANT_RULE = "(tenant_id = keepmem_current_tenant() OR keepmem_is_system())"
PROJECT_FK = (
    "FOREIGN KEY (tenant_id, project_id) REFERENCES projects (tenant_id, id) ON DELETE CASCADE"
)
TABLES = ("memory_threads", "memory_inbox", "memory_spend")


def upgrade(app_role: str = "keepmem_app", **_: object) -> None:
    op.execute(
        f"""
        CREATE TABLE memory_threads (
            tenant_id uuid NOT NULL,
            project_id uuid NOT NULL,
            id text NOT NULL,
            user_id text NOT NULL DEFAULT '',
            agent_id text NOT NULL DEFAULT '',
            created_at timestamptz NOT NULL DEFAULT now(),
            last_message_at timestamptz NOT NULL DEFAULT now(),
            next_seq integer NOT NULL DEFAULT 0,
            extracted_seq integer NOT NULL DEFAULT 0,
            memories_made integer NOT NULL DEFAULT 0,
            PRIMARY KEY (tenant_id, project_id, id),
            {PROJECT_FK}
        )
        """
    )
    op.execute(
        "CREATE INDEX ix_memory_threads_recent ON memory_threads "
        "(tenant_id, project_id, last_message_at DESC)"
    )
    op.execute(
        f"""
        CREATE TABLE memory_inbox (
            tenant_id uuid NOT NULL,
            project_id uuid NOT NULL,
            thread_id text NOT NULL,
            seq integer NOT NULL,
            message jsonb NOT NULL,
            received_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (tenant_id, project_id, thread_id, seq),
            {PROJECT_FK}
        )
        """
    )
    op.execute(
        f"""
        CREATE TABLE memory_spend (
            tenant_id uuid NOT NULL,
            project_id uuid NOT NULL,
            day date NOT NULL,
            calls integer NOT NULL DEFAULT 0,
            tokens_in bigint NOT NULL DEFAULT 0,
            tokens_out bigint NOT NULL DEFAULT 0,
            refused integer NOT NULL DEFAULT 0,
            PRIMARY KEY (tenant_id, project_id, day),
            {PROJECT_FK}
        )
        """
    )
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(
            f"CREATE POLICY tenant_isolation ON {table} USING {TENANT_RULE} "
            f"WITH CHECK {TENANT_RULE}"
        )
        for role in (app_role, f"{app_role}_scoped"):
            op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO {role}")


def downgrade(**_: object) -> None:
    for table in reversed(TABLES):
        op.execute(f"DROP TABLE IF EXISTS {table}")
