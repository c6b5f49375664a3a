"""access: OAuth 2.1, narrowed credentials and tag scopes.

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
  credential (``keepmem.tag_scope``, a JSON list of ``key=value`` terms) sees
  only notes whose tags hold every term, and rows of other tables only when
  their note is visible. Restrictive policies: they narrow, never widen, the
  tenant policy. ``(SELECT keepmem_tag_scope())`` is evaluated once per
  statement (an init plan), so unscoped work pays one comparison a row.

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
UNSCOPED = "(SELECT keepmem_tag_scope()) IS NULL"


def upgrade(app_role: str = "keepmem_app", **_: object) -> None:
    for statement in _statements(SCHEMA):
        op.execute(statement)
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
    # A tag-scoped transaction: notes carrying every term (system documents,
    # whose ids start with '.', are read-only to it), and their rows.
    in_scope = f"({UNSCOPED} OR tag_index @> (SELECT keepmem_tag_scope()))"
    op.execute(
        "CREATE POLICY tag_scope ON notes AS RESTRICTIVE FOR SELECT USING "
        f"({UNSCOPED} OR tag_index @> (SELECT keepmem_tag_scope()) OR id LIKE '.%')"
    )
    op.execute(
        f"CREATE POLICY tag_scope_insert ON notes AS RESTRICTIVE FOR INSERT WITH CHECK {in_scope}"
    )
    op.execute(
        f"CREATE POLICY tag_scope_update ON notes AS RESTRICTIVE FOR UPDATE USING {in_scope} "
        f"WITH CHECK {in_scope}"
    )
    op.execute(f"CREATE POLICY tag_scope_delete ON notes AS RESTRICTIVE FOR DELETE USING {in_scope}")
    for table, column in NOTE_CHILDREN.items():
        visible = VISIBLE_NOTE.format(t=table, col=column)
        # Reads (and the rows an update or delete may touch) are narrowed;
        # inserts are not checked here: a write records its own note's rows,
        # and a change for a note it just deleted must still be written.
        op.execute(
            f"CREATE POLICY tag_scope ON {table} AS RESTRICTIVE FOR SELECT "
            f"USING ({UNSCOPED} OR {visible})"
        )
        for command in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE POLICY tag_scope_{command.lower()} ON {table} AS RESTRICTIVE "
                f"FOR {command} USING ({UNSCOPED} OR {visible})"
            )
    # Edges: both ends must be visible (a walk reveals nothing beyond).
    both = (
        "EXISTS (SELECT 1 FROM notes n WHERE n.tenant_id = edges.tenant_id "
        "AND n.project_id = edges.project_id AND n.id = edges.source_id) AND "
        "EXISTS (SELECT 1 FROM notes n WHERE n.tenant_id = edges.tenant_id "
        "AND n.project_id = edges.project_id AND n.id = edges.target_id)"
    )
    op.execute(
        f"CREATE POLICY tag_scope ON edges AS RESTRICTIVE FOR SELECT USING ({UNSCOPED} OR {both})"
    )
    # Entities: those a visible note mentions.
    mentioned = (
        "EXISTS (SELECT 1 FROM mentions m WHERE m.tenant_id = entities.tenant_id "
        "AND m.project_id = entities.project_id AND m.entity_key = entities.key)"
    )
    op.execute(
        f"CREATE POLICY tag_scope ON entities AS RESTRICTIVE FOR SELECT "
        f"USING ({UNSCOPED} OR {mentioned})"
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


def downgrade(app_role: str = "keepmem_app", **_: object) -> None:
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
