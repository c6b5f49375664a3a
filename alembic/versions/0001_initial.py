"""Initial schema: tenants, projects, keys, notes, versions, parts, embeddings,
edges, job outbox, change feed, audit log; row-level security on every tenant
table; the application role and its grants.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TENANT_TABLES = (
    "projects",
    "api_keys",
    "notes",
    "note_versions",
    "parts",
    "embeddings",
    "edges",
    "jobs",
    "changes",
    "audit_log",
)

SCHEMA = r"""
CREATE EXTENSION IF NOT EXISTS vector;

-- A custom setting read back outside the transaction that set it is '' (not
-- NULL) once it has been set on the connection: nullif keeps the cast safe.
CREATE FUNCTION keepmem_current_tenant() RETURNS uuid
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT nullif(current_setting('keepmem.tenant_id', true), '')::uuid $$;

-- System context (admin API, outbox dispatcher) sees every tenant's rows.
CREATE FUNCTION keepmem_is_system() RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT coalesce(current_setting('keepmem.system', true), '') = 'on' $$;

CREATE TABLE tenants (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name text NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now(),
    disabled_at timestamptz
);

CREATE TABLE projects (
    tenant_id uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    id uuid NOT NULL DEFAULT gen_random_uuid(),
    slug text NOT NULL,
    settings jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id)
);
CREATE UNIQUE INDEX uq_projects_slug ON projects (tenant_id, slug);

CREATE TABLE api_keys (
    tenant_id uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    id uuid NOT NULL DEFAULT gen_random_uuid(),
    name text NOT NULL,
    prefix text NOT NULL,
    key_hash bytea NOT NULL UNIQUE,
    scopes text[] NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz,
    revoked_at timestamptz,
    last_used_at timestamptz,
    PRIMARY KEY (tenant_id, id),
    CHECK (scopes <@ ARRAY['read', 'write', 'admin'] AND cardinality(scopes) > 0)
);

CREATE TABLE notes (
    tenant_id uuid NOT NULL,
    project_id uuid NOT NULL,
    id text COLLATE "C" NOT NULL,
    summary text NOT NULL,
    tags jsonb NOT NULL DEFAULT '{}'::jsonb,
    tag_index text[] NOT NULL DEFAULT '{}',
    content_hash text,
    content_type text,
    source text NOT NULL DEFAULT 'inline',
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    accessed_at timestamptz NOT NULL,
    pending_content text,
    fts tsvector NOT NULL DEFAULT ''::tsvector,
    PRIMARY KEY (tenant_id, project_id, id),
    FOREIGN KEY (tenant_id, project_id) REFERENCES projects (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX ix_notes_updated ON notes (tenant_id, project_id, updated_at);
CREATE INDEX ix_notes_created ON notes (tenant_id, project_id, created_at);
CREATE INDEX ix_notes_accessed ON notes (tenant_id, project_id, accessed_at);
CREATE INDEX ix_notes_fts ON notes USING gin (fts);
CREATE INDEX ix_notes_tag_index ON notes USING gin (tag_index);

CREATE TABLE note_versions (
    tenant_id uuid NOT NULL,
    project_id uuid NOT NULL,
    note_id text COLLATE "C" NOT NULL,
    version integer NOT NULL,
    summary text NOT NULL,
    tags jsonb NOT NULL DEFAULT '{}'::jsonb,
    content_hash text,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    archived_at timestamptz NOT NULL DEFAULT now(),
    fts tsvector NOT NULL DEFAULT ''::tsvector,
    PRIMARY KEY (tenant_id, project_id, note_id, version),
    FOREIGN KEY (tenant_id, project_id, note_id)
        REFERENCES notes (tenant_id, project_id, id) ON DELETE CASCADE
);
CREATE INDEX ix_note_versions_fts ON note_versions USING gin (fts);

CREATE TABLE parts (
    tenant_id uuid NOT NULL,
    project_id uuid NOT NULL,
    note_id text COLLATE "C" NOT NULL,
    part_num integer NOT NULL,
    summary text NOT NULL,
    tags jsonb NOT NULL DEFAULT '{}'::jsonb,
    content_hash text,
    created_at timestamptz NOT NULL DEFAULT now(),
    fts tsvector NOT NULL DEFAULT ''::tsvector,
    PRIMARY KEY (tenant_id, project_id, note_id, part_num),
    FOREIGN KEY (tenant_id, project_id, note_id)
        REFERENCES notes (tenant_id, project_id, id) ON DELETE CASCADE
);
CREATE INDEX ix_parts_fts ON parts USING gin (fts);

CREATE TABLE embeddings (
    tenant_id uuid NOT NULL,
    project_id uuid NOT NULL,
    note_id text COLLATE "C" NOT NULL,
    kind text NOT NULL CHECK (kind IN ('note', 'part', 'version')),
    ref integer NOT NULL DEFAULT 0,
    model text NOT NULL,
    dim integer NOT NULL,
    content_hash text,
    embedding vector NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, project_id, note_id, kind, ref, model),
    FOREIGN KEY (tenant_id, project_id, note_id)
        REFERENCES notes (tenant_id, project_id, id) ON DELETE CASCADE,
    CHECK (vector_dims(embedding) = dim)
);
-- One HNSW index per dimension; 384 is the offline default model's.
CREATE INDEX ix_embeddings_hnsw_384 ON embeddings
    USING hnsw ((embedding::vector(384)) vector_cosine_ops) WHERE dim = 384;
CREATE INDEX ix_embeddings_hash ON embeddings (tenant_id, model, content_hash);

CREATE TABLE edges (
    tenant_id uuid NOT NULL,
    project_id uuid NOT NULL,
    source_id text COLLATE "C" NOT NULL,
    predicate text NOT NULL,
    target_id text COLLATE "C" NOT NULL,
    origin text NOT NULL DEFAULT 'tag',
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, project_id, source_id, predicate, target_id),
    FOREIGN KEY (tenant_id, project_id) REFERENCES projects (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX ix_edges_target ON edges (tenant_id, project_id, target_id);

CREATE TABLE jobs (
    tenant_id uuid NOT NULL,
    id bigint GENERATED BY DEFAULT AS IDENTITY,
    project_id uuid NOT NULL,
    kind text NOT NULL,
    note_id text COLLATE "C",
    payload jsonb NOT NULL DEFAULT '{}'::jsonb,
    status text NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'dispatched', 'running', 'done', 'dead', 'superseded')),
    priority integer NOT NULL DEFAULT 5,
    attempts integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL DEFAULT 5,
    next_run_at timestamptz NOT NULL DEFAULT now(),
    claimed_at timestamptz,
    last_error text,
    dead_lettered_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    FOREIGN KEY (tenant_id, project_id) REFERENCES projects (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX ix_jobs_ready ON jobs (next_run_at) WHERE status = 'pending';
CREATE INDEX ix_jobs_note ON jobs (tenant_id, project_id, note_id, kind);

CREATE TABLE changes (
    tenant_id uuid NOT NULL,
    id bigint GENERATED BY DEFAULT AS IDENTITY,
    project_id uuid NOT NULL,
    mutation text NOT NULL,
    entity_id text COLLATE "C" NOT NULL,
    payload jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    FOREIGN KEY (tenant_id, project_id) REFERENCES projects (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX ix_changes_project ON changes (tenant_id, project_id, id);

CREATE TABLE audit_log (
    tenant_id uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    id bigint GENERATED BY DEFAULT AS IDENTITY,
    actor text NOT NULL,
    action text NOT NULL,
    target text,
    detail jsonb NOT NULL DEFAULT '{}'::jsonb,
    request_id text,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id)
);

-- Authentication happens before the tenant is known: this function is the
-- only way the application role can read a key row without a tenant set,
-- and only by the exact hash of a presented key.
CREATE FUNCTION keepmem_resolve_api_key(p_hash bytea)
    RETURNS TABLE (tenant_id uuid, key_id uuid, scopes text[], expires_at timestamptz,
                   revoked_at timestamptz, tenant_disabled boolean)
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp
    AS $$
        SELECT k.tenant_id, k.id, k.scopes, k.expires_at, k.revoked_at,
               t.disabled_at IS NOT NULL
          FROM api_keys k JOIN tenants t ON t.id = k.tenant_id
         WHERE k.key_hash = p_hash
    $$;
REVOKE ALL ON FUNCTION keepmem_resolve_api_key(bytea) FROM PUBLIC;
"""


def _statements(script: str) -> list[str]:
    """Split a script on top-level semicolons (asyncpg prepares one at a time)."""
    out: list[str] = []
    current: list[str] = []
    in_body = False
    for line in script.splitlines():
        if line.strip().startswith("--") and not in_body:
            continue
        current.append(line)
        in_body ^= line.count("$$") % 2 == 1
        if not in_body and line.rstrip().endswith(";"):
            out.append("\n".join(current).strip())
            current = []
    if "\n".join(current).strip():
        out.append("\n".join(current).strip())
    return out


def upgrade(app_role: str = "keepmem_app", **_: object) -> None:
    for statement in _statements(SCHEMA):
        op.execute(statement)
    op.execute("ALTER TABLE tenants ENABLE ROW LEVEL SECURITY")
    op.execute(
        "CREATE POLICY tenant_isolation ON tenants USING "
        "(id = keepmem_current_tenant() OR keepmem_is_system()) WITH CHECK "
        "(id = keepmem_current_tenant() OR keepmem_is_system())"
    )
    for table in TENANT_TABLES:
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(
            f"CREATE POLICY tenant_isolation ON {table} USING "
            "(tenant_id = keepmem_current_tenant() OR keepmem_is_system()) WITH CHECK "
            "(tenant_id = keepmem_current_tenant() OR keepmem_is_system())"
        )
    op.execute(
        f"""
        DO $$ BEGIN
            IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{app_role}') THEN
                CREATE ROLE {app_role} NOLOGIN;
            END IF;
        END $$;
        """
    )
    tables = ", ".join(("tenants", *TENANT_TABLES))
    op.execute(f"GRANT USAGE ON SCHEMA public TO {app_role}")
    op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {tables} TO {app_role}")
    op.execute(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {app_role}")
    op.execute(f"GRANT EXECUTE ON FUNCTION keepmem_resolve_api_key(bytea) TO {app_role}")


def downgrade(app_role: str = "keepmem_app", **_: object) -> None:
    for table in (
        "audit_log",
        "changes",
        "jobs",
        "edges",
        "embeddings",
        "parts",
        "note_versions",
        "notes",
        "api_keys",
        "projects",
        "tenants",
    ):
        op.execute(f"DROP TABLE IF EXISTS {table} CASCADE")
    op.execute("DROP FUNCTION IF EXISTS keepmem_resolve_api_key(bytea)")
    op.execute("DROP FUNCTION IF EXISTS keepmem_is_system()")
    op.execute("DROP FUNCTION IF EXISTS keepmem_current_tenant()")
    op.execute(f"REVOKE ALL ON SCHEMA public FROM {app_role}")
