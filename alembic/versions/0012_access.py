"""access and governance: OAuth 2.1, narrowed credentials and tag scopes;
the audit log as an append-only API, quotas and usage, retention and erasure.

* ``api_keys`` may be restricted to one project and to a tag scope, and
  remember the credential they were narrowed from (``parent``), so revoking
  a key revokes what was minted from it.
* OAuth: signing keys (private halves encrypted with the server secret),
  clients (dynamically registered public clients have no tenant; service
  accounts belong to one), authorization codes, grants (one per issued token
  family: its refresh token and the ``gid`` every access token carries, so
  revoking either revokes both), and external OpenID Connect issuers a tenant
  trusts.
* Tag scope in row-level security: a transaction bound to a tag-scoped
  credential (``keepmem.tag_scope``, a JSON list of ``key=value`` terms)
  switches to the role ``<app role>_scoped`` and sees only notes whose tags
  hold every term, and rows of other tables only when their note is visible.
  Restrictive policies (they narrow, never widen, the tenant policy) for that
  role alone: unscoped work does not plan or run them (with them on every
  role, find cost 14 % more, bench/access.py).

* Audit: ``audit_log`` keeps the project and the outcome of each entry; the
  application role may only insert into it (retention and erasure go through
  SECURITY DEFINER functions), and it no longer cascades from ``tenants``:
  erasing a tenant leaves the record that it was erased.
* Quotas: per-tenant limits on ``tenants``; usage counted by triggers into
  16 shards per tenant (a hot counter row would serialise a tenant's writes),
  checked as notes and versions are inserted: SQLSTATE ``KMQ01`` names the
  quota (the API answers 403). Jobs are counted per UTC day.
* Retention: ``notes.expires_at`` and ``projects.retention_days``.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-24
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = """
ALTER TABLE api_keys
    ADD COLUMN project_id uuid,
    ADD COLUMN tag_scope jsonb NOT NULL DEFAULT '[]'::jsonb,
    ADD COLUMN parent text;

CREATE FUNCTION keepmem_is_oauth() RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT coalesce(current_setting('keepmem.oauth', true), '') = 'on' $$;

CREATE FUNCTION keepmem_tag_scope() RETURNS text[]
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
        SELECT CASE WHEN coalesce(current_setting('keepmem.tag_scope', true), '') = ''
                    THEN NULL
                    ELSE ARRAY(SELECT jsonb_array_elements_text(
                                   current_setting('keepmem.tag_scope', true)::jsonb))
               END
    $$;

CREATE TABLE oauth_keys (
    kid text PRIMARY KEY,
    private_key bytea NOT NULL,
    public_jwk jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    retired_at timestamptz
);

CREATE TABLE oauth_clients (
    client_id text PRIMARY KEY,
    tenant_id uuid REFERENCES tenants(id) ON DELETE CASCADE,
    secret_hash bytea,
    metadata jsonb NOT NULL,
    project_id uuid,
    scopes text[] NOT NULL DEFAULT '{}',
    tag_scope jsonb NOT NULL DEFAULT '[]'::jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);
CREATE INDEX ix_oauth_clients_tenant ON oauth_clients (tenant_id) WHERE tenant_id IS NOT NULL;

CREATE TABLE oauth_codes (
    code_hash bytea PRIMARY KEY,
    client_id text NOT NULL REFERENCES oauth_clients(client_id) ON DELETE CASCADE,
    tenant_id uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    key_id uuid,
    project_id uuid NOT NULL,
    scopes text[] NOT NULL,
    tag_scope jsonb NOT NULL DEFAULT '[]'::jsonb,
    redirect_uri text,
    code_challenge text,
    code_challenge_method text,
    resource text,
    nonce text,
    expires_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE oauth_grants (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    client_id text NOT NULL,
    key_id uuid,
    project_id uuid NOT NULL,
    scopes text[] NOT NULL,
    tag_scope jsonb NOT NULL DEFAULT '[]'::jsonb,
    resource text,
    refresh_hash bytea UNIQUE,
    refresh_expires_at timestamptz,
    access_expires_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);
CREATE INDEX ix_oauth_grants_tenant ON oauth_grants (tenant_id, created_at);

CREATE TABLE oauth_issuers (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    issuer text NOT NULL,
    audience text NOT NULL,
    jwks jsonb NOT NULL,
    project_claim text,
    default_project text NOT NULL DEFAULT 'default',
    scope_claim text NOT NULL DEFAULT 'scope',
    default_scopes text[] NOT NULL DEFAULT '{read}',
    tag_claims jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (issuer, audience)
);

-- A narrowed credential lives while every credential above it does: its
-- parent key (not revoked, not expired, and so on up) or the OAuth grant it
-- was minted from. An external token's parent bounds it by expiry alone.
CREATE FUNCTION keepmem_credential_live(p_tenant uuid, p_parent text) RETURNS boolean
    LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp
    AS $$
    DECLARE
        up text := p_parent;
        depth int := 0;
        k record;
    BEGIN
        WHILE up IS NOT NULL LOOP
            depth := depth + 1;
            IF depth > 16 THEN
                RETURN false;
            END IF;
            IF up LIKE 'key:%' THEN
                SELECT a.revoked_at, a.expires_at, a.parent INTO k
                  FROM api_keys a WHERE a.tenant_id = p_tenant AND a.id = substr(up, 5)::uuid;
                IF NOT FOUND OR k.revoked_at IS NOT NULL
                   OR (k.expires_at IS NOT NULL AND k.expires_at <= now()) THEN
                    RETURN false;
                END IF;
                up := k.parent;
            ELSIF up LIKE 'grant:%' THEN
                RETURN EXISTS (
                    SELECT 1 FROM oauth_grants g
                      LEFT JOIN oauth_clients c ON c.client_id = g.client_id
                      LEFT JOIN api_keys a ON a.tenant_id = g.tenant_id AND a.id = g.key_id
                     WHERE g.id = substr(up, 7)::uuid AND g.tenant_id = p_tenant
                       AND g.revoked_at IS NULL AND c.revoked_at IS NULL
                       AND (g.key_id IS NULL OR (a.id IS NOT NULL AND a.revoked_at IS NULL
                            AND (a.expires_at IS NULL OR a.expires_at > now())
                            AND keepmem_credential_live(p_tenant, a.parent))));
            ELSE
                RETURN true;
            END IF;
        END LOOP;
        RETURN true;
    END
    $$;
REVOKE ALL ON FUNCTION keepmem_credential_live(uuid, text) FROM PUBLIC;

-- Keys are resolved before a tenant is known; recreated with the columns a
-- narrowed key carries and whether the credentials above it still live.
DROP FUNCTION keepmem_resolve_api_key(bytea);
CREATE FUNCTION keepmem_resolve_api_key(p_hash bytea)
    RETURNS TABLE (tenant_id uuid, key_id uuid, scopes text[], expires_at timestamptz,
                   revoked_at timestamptz, tenant_disabled boolean, project_id uuid,
                   tag_scope jsonb, parent_live boolean)
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp
    AS $$
        SELECT k.tenant_id, k.id, k.scopes, k.expires_at, k.revoked_at,
               t.disabled_at IS NOT NULL, k.project_id, k.tag_scope,
               k.parent IS NULL OR keepmem_credential_live(k.tenant_id, k.parent)
          FROM api_keys k JOIN tenants t ON t.id = k.tenant_id
         WHERE k.key_hash = p_hash
    $$;
REVOKE ALL ON FUNCTION keepmem_resolve_api_key(bytea) FROM PUBLIC;

-- An access token names its grant; the grant is live while it, the key that
-- consented to it (and the credentials above that key), the client and the
-- tenant are.
CREATE FUNCTION keepmem_resolve_grant(p_id uuid)
    RETURNS TABLE (tenant_id uuid, client_id text, key_id uuid, scopes text[],
                   project_id uuid, tag_scope jsonb, revoked boolean, tenant_disabled boolean)
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp
    AS $$
        SELECT g.tenant_id, g.client_id, g.key_id, g.scopes, g.project_id, g.tag_scope,
               g.revoked_at IS NOT NULL
               OR c.revoked_at IS NOT NULL
               OR (g.key_id IS NOT NULL AND NOT keepmem_credential_live(
                       g.tenant_id, 'key:' || g.key_id::text)),
               t.disabled_at IS NOT NULL
          FROM oauth_grants g
          JOIN tenants t ON t.id = g.tenant_id
          LEFT JOIN oauth_clients c ON c.client_id = g.client_id
         WHERE g.id = p_id
    $$;
REVOKE ALL ON FUNCTION keepmem_resolve_grant(uuid) FROM PUBLIC;

-- A token from an external issuer names the issuer and audience it was
-- minted for: which tenant trusts that pair, and how to read its claims.
CREATE FUNCTION keepmem_resolve_issuer(p_issuer text, p_audience text[])
    RETURNS SETOF oauth_issuers
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp
    AS $$
        SELECT i.* FROM oauth_issuers i JOIN tenants t ON t.id = i.tenant_id
         WHERE i.issuer = p_issuer AND i.audience = ANY (p_audience)
           AND t.disabled_at IS NULL
    $$;
REVOKE ALL ON FUNCTION keepmem_resolve_issuer(text, text[]) FROM PUBLIC;
"""

GOVERNANCE = """
ALTER TABLE audit_log DROP CONSTRAINT audit_log_tenant_id_fkey;
ALTER TABLE audit_log
    ADD COLUMN project_id uuid,
    ADD COLUMN outcome text NOT NULL DEFAULT 'ok';
CREATE INDEX ix_audit_time ON audit_log (created_at);

CREATE FUNCTION keepmem_prune_audit(p_tenant uuid, p_project uuid, p_before timestamptz)
    RETURNS bigint
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp
    AS $$
    DECLARE
        n bigint;
    BEGIN
        -- A tenant's own entries, or (system only, p_tenant NULL) every tenant's.
        IF NOT (keepmem_is_system() OR p_tenant = keepmem_current_tenant()) THEN
            RAISE EXCEPTION 'keepmem_prune_audit: not this tenant' USING ERRCODE = '42501';
        END IF;
        DELETE FROM audit_log
         WHERE (p_tenant IS NULL OR tenant_id = p_tenant)
           AND (p_project IS NULL OR project_id = p_project)
           AND (p_before IS NULL OR created_at < p_before);
        GET DIAGNOSTICS n = ROW_COUNT;
        RETURN n;
    END
    $$;
REVOKE ALL ON FUNCTION keepmem_prune_audit(uuid, uuid, timestamptz) FROM PUBLIC;

ALTER TABLE notes ADD COLUMN expires_at timestamptz;
CREATE INDEX ix_notes_expires ON notes (expires_at) WHERE expires_at IS NOT NULL;
ALTER TABLE projects ADD COLUMN retention_days integer;

ALTER TABLE tenants
    ADD COLUMN quota_notes bigint,
    ADD COLUMN quota_bytes bigint,
    ADD COLUMN quota_requests_per_day bigint,
    ADD COLUMN quota_jobs_per_day bigint;

CREATE TABLE usage_counters (
    tenant_id uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    shard smallint NOT NULL,
    notes bigint NOT NULL DEFAULT 0,
    bytes bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, shard)
);
CREATE TABLE usage_daily (
    tenant_id uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    day date NOT NULL,
    shard smallint NOT NULL,
    jobs bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, day, shard)
);

CREATE FUNCTION keepmem_row_bytes(p_summary text, p_tags jsonb, p_held text) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT octet_length(p_summary)::bigint + octet_length(p_tags::text)
                 + coalesce(octet_length(p_held), 0) $$;

-- Count a change of notes and bytes into one of the tenant's shards; when
-- something was added, refuse it past the tenant's quota.
CREATE FUNCTION keepmem_count(p_tenant uuid, p_notes bigint, p_bytes bigint, p_check boolean)
    RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp
    AS $$
    DECLARE
        q record;
        used record;
    BEGIN
        IF p_notes = 0 AND p_bytes = 0 THEN
            RETURN;
        END IF;
        -- A tenant being erased: its counters go with it.
        IF NOT EXISTS (SELECT 1 FROM tenants WHERE id = p_tenant) THEN
            RETURN;
        END IF;
        INSERT INTO usage_counters AS u (tenant_id, shard, notes, bytes)
             VALUES (p_tenant, (txid_current() % 16)::smallint, p_notes, p_bytes)
        ON CONFLICT (tenant_id, shard)
             DO UPDATE SET notes = u.notes + p_notes, bytes = u.bytes + p_bytes;
        IF NOT p_check OR (p_notes <= 0 AND p_bytes <= 0) THEN
            RETURN;
        END IF;
        SELECT quota_notes, quota_bytes INTO q FROM tenants WHERE id = p_tenant;
        IF q.quota_notes IS NULL AND q.quota_bytes IS NULL THEN
            RETURN;
        END IF;
        SELECT coalesce(sum(notes), 0) AS notes, coalesce(sum(bytes), 0) AS bytes INTO used
          FROM usage_counters WHERE tenant_id = p_tenant;
        IF p_notes > 0 AND q.quota_notes IS NOT NULL AND used.notes > q.quota_notes THEN
            RAISE EXCEPTION 'quota exceeded: notes (limit %)', q.quota_notes
                USING ERRCODE = 'KMQ01';
        END IF;
        IF p_bytes > 0 AND q.quota_bytes IS NOT NULL AND used.bytes > q.quota_bytes THEN
            RAISE EXCEPTION 'quota exceeded: bytes (limit %)', q.quota_bytes
                USING ERRCODE = 'KMQ01';
        END IF;
    END
    $$;

-- keepmem's own documents (ids starting with '.', seeded in every project)
-- are not the tenant's: they count towards nothing.
CREATE FUNCTION keepmem_count_notes() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp
    AS $$
    BEGIN
        IF left(coalesce(NEW.id, OLD.id), 1) = '.' THEN
            RETURN NULL;
        END IF;
        IF TG_OP = 'INSERT' THEN
            PERFORM keepmem_count(NEW.tenant_id, 1,
                keepmem_row_bytes(NEW.summary, NEW.tags, NEW.pending_content), true);
        ELSIF TG_OP = 'DELETE' THEN
            PERFORM keepmem_count(OLD.tenant_id, -1,
                -keepmem_row_bytes(OLD.summary, OLD.tags, OLD.pending_content), false);
        ELSE
            PERFORM keepmem_count(NEW.tenant_id, 0,
                keepmem_row_bytes(NEW.summary, NEW.tags, NEW.pending_content)
                - keepmem_row_bytes(OLD.summary, OLD.tags, OLD.pending_content), false);
        END IF;
        RETURN NULL;
    END
    $$;

-- Versions count towards bytes (checked: a put makes them); parts too, but
-- unchecked (background work makes them from what was already accepted).
CREATE FUNCTION keepmem_count_rows() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp
    AS $$
    BEGIN
        IF left(coalesce(NEW.note_id, OLD.note_id), 1) = '.' THEN
            RETURN NULL;
        END IF;
        IF TG_OP = 'INSERT' THEN
            PERFORM keepmem_count(NEW.tenant_id, 0, keepmem_row_bytes(NEW.summary, NEW.tags, NULL),
                                  TG_TABLE_NAME = 'note_versions');
        ELSE
            PERFORM keepmem_count(OLD.tenant_id, 0,
                                  -keepmem_row_bytes(OLD.summary, OLD.tags, NULL), false);
        END IF;
        RETURN NULL;
    END
    $$;

-- Jobs are counted per day; the API refuses writes once the day's quota is
-- used (background work a write already caused is never refused).
CREATE FUNCTION keepmem_count_jobs() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp
    AS $$
    BEGIN
        INSERT INTO usage_daily AS u (tenant_id, day, shard, jobs)
             VALUES (NEW.tenant_id, (now() AT TIME ZONE 'UTC')::date,
                     (txid_current() % 16)::smallint, 1)
        ON CONFLICT (tenant_id, day, shard) DO UPDATE SET jobs = u.jobs + 1;
        RETURN NULL;
    END
    $$;

CREATE TRIGGER count_usage AFTER INSERT OR DELETE OR UPDATE OF summary, tags, pending_content
    ON notes FOR EACH ROW EXECUTE FUNCTION keepmem_count_notes();
CREATE TRIGGER count_usage AFTER INSERT OR DELETE ON note_versions
    FOR EACH ROW EXECUTE FUNCTION keepmem_count_rows();
CREATE TRIGGER count_usage AFTER INSERT OR DELETE ON parts
    FOR EACH ROW EXECUTE FUNCTION keepmem_count_rows();
CREATE TRIGGER count_usage AFTER INSERT ON jobs
    FOR EACH ROW EXECUTE FUNCTION keepmem_count_jobs();

INSERT INTO usage_counters (tenant_id, shard, notes, bytes)
SELECT tenant_id, 0, sum(n), sum(b) FROM (
    SELECT tenant_id, count(*) AS n,
           sum(keepmem_row_bytes(summary, tags, pending_content)) AS b
      FROM notes WHERE id NOT LIKE '.%' GROUP BY tenant_id
    UNION ALL
    SELECT tenant_id, 0, sum(keepmem_row_bytes(summary, tags, NULL))
      FROM note_versions WHERE note_id NOT LIKE '.%' GROUP BY tenant_id
    UNION ALL
    SELECT tenant_id, 0, sum(keepmem_row_bytes(summary, tags, NULL))
      FROM parts WHERE note_id NOT LIKE '.%' GROUP BY tenant_id
) counted GROUP BY tenant_id;
"""

# The OAuth endpoints (token, revocation, introspection, registration) work
# before a tenant is known: they bind ``keepmem.oauth`` instead.
OAUTH_TABLES = ("oauth_clients", "oauth_codes", "oauth_grants")

# Tables whose rows belong to one note, and the column naming it.
NOTE_CHILDREN = {
    "note_versions": "note_id",
    "parts": "note_id",
    "embeddings": "note_id",
    "mentions": "note_id",
    "relations": "note_id",
    "blobs": "note_id",
    "jobs": "note_id",
    "changes": "entity_id",
}


def _statements(script: str) -> list[str]:
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
    return out


VISIBLE_NOTE = (
    "EXISTS (SELECT 1 FROM notes n WHERE n.tenant_id = {t}.tenant_id "
    "AND n.project_id = {t}.project_id AND n.id = {t}.{col})"
)
IN_SCOPE = "tag_index @> keepmem_tag_scope()"


def _scoped_role(app_role: str) -> None:
    """The role a tag-scoped transaction switches to (``SET LOCAL ROLE``):
    the tag-scope policies apply to it alone, so unscoped work is planned and
    run exactly as before. It holds the application role's privileges; the
    application role may switch to it without inheriting its policies."""
    scoped = f"{app_role}_scoped"
    op.execute(
        f"""
        DO $$ BEGIN
            IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{scoped}') THEN
                CREATE ROLE {scoped} NOLOGIN;
            END IF;
            IF current_setting('server_version_num')::int >= 160000 THEN
                EXECUTE 'GRANT {scoped} TO {app_role} WITH INHERIT FALSE, SET TRUE';
            ELSE
                EXECUTE 'GRANT {scoped} TO {app_role}';
                EXECUTE 'ALTER ROLE {app_role} NOINHERIT';
            END IF;
        END $$
        """
    )
    op.execute(
        f"""
        DO $$ DECLARE g record; BEGIN
            FOR g IN SELECT table_name, privilege_type FROM information_schema.role_table_grants
                      WHERE grantee = '{app_role}' AND table_schema = 'public' LOOP
                EXECUTE format('GRANT %s ON %I TO {scoped}', g.privilege_type, g.table_name);
            END LOOP;
        END $$
        """
    )
    op.execute(f"GRANT USAGE ON SCHEMA public TO {scoped}")
    op.execute(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {scoped}")
    op.execute(
        f"CREATE FUNCTION keepmem_scoped_role() RETURNS text LANGUAGE sql IMMUTABLE "
        f"AS $$ SELECT '{scoped}'::text $$"
    )


def _tag_scope_policies(scoped: str) -> None:
    """A tag-scoped transaction sees notes carrying every term (system
    documents, ids starting with '.', read-only), and rows of other tables
    only when their note is visible; with no terms set it sees nothing."""
    op.execute(
        f"CREATE POLICY tag_scope ON notes AS RESTRICTIVE FOR SELECT TO {scoped} "
        f"USING ({IN_SCOPE} OR id LIKE '.%')"
    )
    op.execute(
        f"CREATE POLICY tag_scope_insert ON notes AS RESTRICTIVE FOR INSERT TO {scoped} "
        f"WITH CHECK ({IN_SCOPE})"
    )
    op.execute(
        f"CREATE POLICY tag_scope_update ON notes AS RESTRICTIVE FOR UPDATE TO {scoped} "
        f"USING ({IN_SCOPE}) WITH CHECK ({IN_SCOPE})"
    )
    op.execute(
        f"CREATE POLICY tag_scope_delete ON notes AS RESTRICTIVE FOR DELETE TO {scoped} "
        f"USING ({IN_SCOPE})"
    )
    for table, column in NOTE_CHILDREN.items():
        visible = VISIBLE_NOTE.format(t=table, col=column)
        # Reads (and the rows an update or delete may touch) are narrowed;
        # inserts are not checked here: a write records its own note's rows,
        # and a change for a note it just deleted must still be written.
        op.execute(
            f"CREATE POLICY tag_scope ON {table} AS RESTRICTIVE FOR SELECT TO {scoped} "
            f"USING ({visible})"
        )
        for command in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE POLICY tag_scope_{command.lower()} ON {table} AS RESTRICTIVE "
                f"FOR {command} TO {scoped} USING ({visible})"
            )
    # Edges: both ends must be visible (a walk reveals nothing beyond).
    both = (
        "EXISTS (SELECT 1 FROM notes n WHERE n.tenant_id = edges.tenant_id "
        "AND n.project_id = edges.project_id AND n.id = edges.source_id) AND "
        "EXISTS (SELECT 1 FROM notes n WHERE n.tenant_id = edges.tenant_id "
        "AND n.project_id = edges.project_id AND n.id = edges.target_id)"
    )
    op.execute(
        f"CREATE POLICY tag_scope ON edges AS RESTRICTIVE FOR SELECT TO {scoped} USING ({both})"
    )
    # Entities: those a visible note mentions.
    mentioned = (
        "EXISTS (SELECT 1 FROM mentions m WHERE m.tenant_id = entities.tenant_id "
        "AND m.project_id = entities.project_id AND m.entity_key = entities.key)"
    )
    op.execute(
        f"CREATE POLICY tag_scope ON entities AS RESTRICTIVE FOR SELECT TO {scoped} "
        f"USING ({mentioned})"
    )


def upgrade(app_role: str = "keepmem_app", **_: object) -> None:
    for statement in _statements(SCHEMA) + _statements(GOVERNANCE):
        op.execute(statement)
    for table in ("usage_counters", "usage_daily"):
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        rule = "(tenant_id = keepmem_current_tenant() OR keepmem_is_system())"
        op.execute(f"CREATE POLICY tenant_isolation ON {table} USING {rule} WITH CHECK {rule}")
        op.execute(f"GRANT SELECT ON {table} TO {app_role}")
    op.execute(f"GRANT DELETE ON usage_daily TO {app_role}")  # the sweeper forgets old days
    # The log is appended to by the application, never edited by it.
    op.execute(f"REVOKE UPDATE, DELETE ON audit_log FROM {app_role}")
    op.execute(
        f"GRANT EXECUTE ON FUNCTION keepmem_prune_audit(uuid, uuid, timestamptz) TO {app_role}"
    )
    for table in OAUTH_TABLES:
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        rule = "(tenant_id = keepmem_current_tenant() OR keepmem_is_system() OR keepmem_is_oauth())"
        op.execute(f"CREATE POLICY tenant_isolation ON {table} USING {rule} WITH CHECK {rule}")
    op.execute("ALTER TABLE oauth_issuers ENABLE ROW LEVEL SECURITY")
    op.execute(
        "CREATE POLICY tenant_isolation ON oauth_issuers USING "
        "(tenant_id = keepmem_current_tenant() OR keepmem_is_system()) WITH CHECK "
        "(tenant_id = keepmem_current_tenant() OR keepmem_is_system())"
    )
    tables = ", ".join(("oauth_keys", *OAUTH_TABLES, "oauth_issuers"))
    op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {tables} TO {app_role}")
    for function in (
        "keepmem_credential_live(uuid, text)",
        "keepmem_resolve_api_key(bytea)",
        "keepmem_resolve_grant(uuid)",
        "keepmem_resolve_issuer(text, text[])",
    ):
        op.execute(f"GRANT EXECUTE ON FUNCTION {function} TO {app_role}")
    # Tag scopes: last, so the scoped role gets every privilege granted above.
    _scoped_role(app_role)
    _tag_scope_policies(f"{app_role}_scoped")


def downgrade(app_role: str = "keepmem_app", **_: object) -> None:
    scoped = f"{app_role}_scoped"
    op.execute("DROP FUNCTION IF EXISTS keepmem_scoped_role()")
    # The role is shared by every database of the server: only what this one
    # granted it goes.
    op.execute(f"DROP OWNED BY {scoped}")
    for table in ("notes", "note_versions", "parts", "jobs"):
        op.execute(f"DROP TRIGGER IF EXISTS count_usage ON {table}")
    for fn in (
        "keepmem_count_jobs()",
        "keepmem_count_rows()",
        "keepmem_count_notes()",
        "keepmem_count(uuid, bigint, bigint, boolean)",
        "keepmem_row_bytes(text, jsonb, text)",
        "keepmem_prune_audit(uuid, uuid, timestamptz)",
    ):
        op.execute(f"DROP FUNCTION IF EXISTS {fn}")
    op.execute("DROP TABLE IF EXISTS usage_daily")
    op.execute("DROP TABLE IF EXISTS usage_counters")
    op.execute(
        "ALTER TABLE tenants DROP COLUMN quota_notes, DROP COLUMN quota_bytes, "
        "DROP COLUMN quota_requests_per_day, DROP COLUMN quota_jobs_per_day"
    )
    op.execute("ALTER TABLE projects DROP COLUMN retention_days")
    op.execute("DROP INDEX IF EXISTS ix_notes_expires")
    op.execute("ALTER TABLE notes DROP COLUMN expires_at")
    op.execute(f"GRANT UPDATE, DELETE ON audit_log TO {app_role}")
    op.execute("DROP INDEX IF EXISTS ix_audit_time")
    op.execute("ALTER TABLE audit_log DROP COLUMN project_id, DROP COLUMN outcome")
    op.execute("DELETE FROM audit_log WHERE tenant_id NOT IN (SELECT id FROM tenants)")
    op.execute(
        "ALTER TABLE audit_log ADD CONSTRAINT audit_log_tenant_id_fkey FOREIGN KEY (tenant_id) "
        "REFERENCES tenants(id) ON DELETE CASCADE"
    )
    for table in (*NOTE_CHILDREN, "notes", "edges", "entities"):
        for name in ("tag_scope", "tag_scope_insert", "tag_scope_update", "tag_scope_delete"):
            op.execute(f"DROP POLICY IF EXISTS {name} ON {table}")
    op.execute("DROP FUNCTION IF EXISTS keepmem_resolve_issuer(text, text[])")
    op.execute("DROP FUNCTION IF EXISTS keepmem_resolve_grant(uuid)")
    op.execute("DROP FUNCTION IF EXISTS keepmem_credential_live(uuid, text)")
    for table in ("oauth_issuers", "oauth_grants", "oauth_codes", "oauth_clients", "oauth_keys"):
        op.execute(f"DROP TABLE IF EXISTS {table}")
    op.execute("DROP FUNCTION keepmem_resolve_api_key(bytea)")
    op.execute(
        """
        CREATE FUNCTION keepmem_resolve_api_key(p_hash bytea)
            RETURNS TABLE (tenant_id uuid, key_id uuid, scopes text[], expires_at timestamptz,
                           revoked_at timestamptz, tenant_disabled boolean)
            LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp
            AS $$
                SELECT k.tenant_id, k.id, k.scopes, k.expires_at, k.revoked_at,
                       t.disabled_at IS NOT NULL
                  FROM api_keys k JOIN tenants t ON t.id = k.tenant_id
                 WHERE k.key_hash = p_hash
            $$
        """
    )
    op.execute("REVOKE ALL ON FUNCTION keepmem_resolve_api_key(bytea) FROM PUBLIC")
    op.execute(f"GRANT EXECUTE ON FUNCTION keepmem_resolve_api_key(bytea) TO {app_role}")
    op.execute("DROP FUNCTION IF EXISTS keepmem_tag_scope()")
    op.execute("DROP FUNCTION IF EXISTS keepmem_is_oauth()")
    op.execute(
        "ALTER TABLE api_keys DROP COLUMN parent, DROP COLUMN tag_scope, DROP COLUMN project_id"
    )
