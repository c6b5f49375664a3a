"""Trusted issuers unique per tenant; registered clients' first use.

* ``oauth_issuers``: an (issuer, audience) pair was unique across the
  whole server, so the first tenant to trust one kept every other tenant
  from trusting it (squatting), and the 409 told a tenant that another one
  trusted it (an oracle). The pair is now unique per tenant. A token whose
  pair several tenants trust names its tenant (``X-Keepmem-Tenant``).
* ``oauth_clients.used_at``: when a client first completed a grant.
  Registration is open to anyone, so the clients that never did are kept
  up to a cap, the oldest pruned (``KEEPMEM_OAUTH_MAX_UNUSED_CLIENTS``); the
  partial index serves that pruning. Existing clients with a grant count as
  used from their first grant.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels = None
depends_on = None


def upgrade(**_: object) -> None:
    op.execute("ALTER TABLE oauth_issuers DROP CONSTRAINT oauth_issuers_issuer_audience_key")
    # issuer and audience lead: keepmem_resolve_issuer looks a token's pair
    # up across tenants through this index.
    op.execute(
        "ALTER TABLE oauth_issuers ADD CONSTRAINT oauth_issuers_tenant_pair_key "
        "UNIQUE (issuer, audience, tenant_id)"
    )
    op.execute("ALTER TABLE oauth_clients ADD COLUMN used_at timestamptz")
    op.execute(
        """
        UPDATE oauth_clients c SET used_at = g.first
          FROM (SELECT client_id, min(created_at) AS first
                  FROM oauth_grants GROUP BY client_id) g
         WHERE g.client_id = c.client_id
        """
    )
    op.execute(
        "CREATE INDEX ix_oauth_clients_unused ON oauth_clients (created_at, client_id) "
        "WHERE tenant_id IS NULL AND used_at IS NULL"
    )


def downgrade(**_: object) -> None:
    op.execute("DROP INDEX IF EXISTS ix_oauth_clients_unused")
    op.execute("ALTER TABLE oauth_clients DROP COLUMN IF EXISTS used_at")
    # The server-wide uniqueness cannot hold a pair two tenants trust: say
    # so rather than pick which tenant loses its trust.
    op.execute(
        """
        DO $$
        BEGIN
            IF EXISTS (SELECT 1 FROM oauth_issuers
                        GROUP BY issuer, audience HAVING count(*) > 1) THEN
                RAISE EXCEPTION USING MESSAGE = 'cannot downgrade: an issuer and audience '
                    || 'are trusted by more than one tenant; remove all but one first';
            END IF;
        END
        $$
        """
    )
    op.execute("ALTER TABLE oauth_issuers DROP CONSTRAINT oauth_issuers_tenant_pair_key")
    op.execute(
        "ALTER TABLE oauth_issuers ADD CONSTRAINT oauth_issuers_issuer_audience_key "
        "UNIQUE (issuer, audience)"
    )
