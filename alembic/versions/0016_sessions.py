"""Coding-agent sessions: records, recurring patterns, resume blocks, model
spend and saved collections (``app.sessions``).

* ``agent_sessions``: one row per (project, host session id): platform, cwd,
  times, counts, the next event number (``next_seq``) and how far the
  worker has digested (``digested_seq``); ``capture`` / ``inject`` are the
  session's own opt-outs; ``state`` is what the digest carries from one
  run to the next (the latest todo list, recent prompts and files) and
  ``last_checkpoint`` the newest checkpoint, as the resume block reads it.
  The events themselves are notes.
* ``session_inbox``: cleaned events the worker has not digested yet (a
  crash mid-digest loses none: they leave the inbox in the transaction that
  writes what was made of them).
* ``session_patterns``: what recurs across a project's sessions (an error
  template, a fix, a decision, a preference), one row per (kind, key) with
  its counts: seen again, the count goes up; no copy is added.
* ``session_resume``: the "where you left off" block the worker precomputes
  per (project, cwd), so the read a hook waits on is one row.
* ``session_spend``: a project's model calls and tokens per UTC day (the
  budget of LLM compression).
* ``session_collections``: named, saved queries.

Tag-scoped keys never reach these tables: the routes refuse them before
any statement (a session belongs to a project, not to a tag). The scoped
role holds the application role's privileges all the same, as on every
table.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels = None
depends_on = None

TENANT_RULE = "(tenant_id = keepmem_current_tenant() OR keepmem_is_system())"
PROJECT_FK = (
    "FOREIGN KEY (tenant_id, project_id) REFERENCES projects (tenant_id, id) ON DELETE CASCADE"
)
TABLES = (
    "agent_sessions",
    "session_inbox",
    "session_patterns",
    "session_resume",
    "session_spend",
    "session_collections",
)


def upgrade(app_role: str = "keepmem_app", **_: object) -> None:
    op.execute(
        f"""
        CREATE TABLE agent_sessions (
            tenant_id uuid NOT NULL,
            project_id uuid NOT NULL,
            id text NOT NULL,
            platform text NOT NULL,
            cwd text NOT NULL DEFAULT '',
            started_at timestamptz NOT NULL DEFAULT now(),
            last_event_at timestamptz NOT NULL DEFAULT now(),
            ended_at timestamptz,
            end_reason text NOT NULL DEFAULT '',
            counts jsonb NOT NULL DEFAULT '{{}}'::jsonb,
            summary text NOT NULL DEFAULT '',
            capture boolean NOT NULL DEFAULT true,
            inject boolean NOT NULL DEFAULT true,
            next_seq integer NOT NULL DEFAULT 0,
            digested_seq integer NOT NULL DEFAULT 0,
            checkpoints integer NOT NULL DEFAULT 0,
            checkpoint_seq integer NOT NULL DEFAULT 0,
            state jsonb NOT NULL DEFAULT '{{}}'::jsonb,
            last_checkpoint jsonb,
            PRIMARY KEY (tenant_id, project_id, id),
            {PROJECT_FK}
        )
        """
    )
    op.execute(
        "CREATE INDEX ix_agent_sessions_recent ON agent_sessions "
        "(tenant_id, project_id, last_event_at DESC)"
    )
    # The reconcile loop's idle sweep: sessions with events not checkpointed.
    op.execute(
        "CREATE INDEX ix_agent_sessions_idle ON agent_sessions (last_event_at) "
        "WHERE checkpoint_seq < next_seq AND ended_at IS NULL"
    )
    op.execute(
        f"""
        CREATE TABLE session_inbox (
            tenant_id uuid NOT NULL,
            project_id uuid NOT NULL,
            session_id text NOT NULL,
            seq integer NOT NULL,
            event jsonb NOT NULL,
            received_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (tenant_id, project_id, session_id, seq),
            {PROJECT_FK}
        )
        """
    )
    op.execute(
        f"""
        CREATE TABLE session_patterns (
            tenant_id uuid NOT NULL,
            project_id uuid NOT NULL,
            kind text NOT NULL,
            key text NOT NULL,
            template text NOT NULL,
            example text NOT NULL DEFAULT '',
            count integer NOT NULL DEFAULT 0,
            sessions text[] NOT NULL DEFAULT '{{}}',
            files text[] NOT NULL DEFAULT '{{}}',
            first_seen timestamptz NOT NULL DEFAULT now(),
            last_seen timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (tenant_id, project_id, kind, key),
            {PROJECT_FK}
        )
        """
    )
    op.execute(
        f"""
        CREATE TABLE session_resume (
            tenant_id uuid NOT NULL,
            project_id uuid NOT NULL,
            cwd text NOT NULL,
            context text NOT NULL,
            computed_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (tenant_id, project_id, cwd),
            {PROJECT_FK}
        )
        """
    )
    op.execute(
        f"""
        CREATE TABLE session_spend (
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
    op.execute(
        f"""
        CREATE TABLE session_collections (
            tenant_id uuid NOT NULL,
            project_id uuid NOT NULL,
            name text NOT NULL,
            query jsonb NOT NULL,
            description text NOT NULL DEFAULT '',
            created_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (tenant_id, project_id, name),
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
