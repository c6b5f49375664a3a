"""Tag scopes at the cost of an index condition (issue 36).

A tag-scoped key's find cost about twice an unscoped key's (bench/access.py).
The plans showed why:

* ``keepmem_tag_scope()`` parsed the JSON setting inside a sub-select, so
  the planner could not inline it: every note a scoped statement read called
  a SQL function (a small executor run each time), in the ``notes`` policy and
  again inside every child table's check. Nor could the planner see the terms
  when it estimated how many notes carry them.
* The child tables' checks (``EXISTS (… notes …)``) were often run hashed:
  the planner read every visible note once per statement and looked each row
  up. That read was not bound to the tenant (every note in the database
  carrying the terms, and every tenant's system documents, then filtered),
  and it grows with the tenant, not with the rows the statement reads: with
  60,000 visible notes in another project of the tenant, a scoped find of a
  2,000-note project took 2.4x an unscoped one (3.5x once the scope test was
  cheap, which made hashing look cheaper still).

Now the terms are stored in PostgreSQL's own text form of a ``text[]``
(``app.tenancy.bind``) and ``keepmem_tag_scope()`` is a cast of the setting:
an expression the planner inlines, evaluates without a function call, sees
through when estimating, and uses as a key of the GIN index on
``tag_index``. An empty or absent scope is NULL: such a transaction sees no
tenant note (before, an empty list matched every note). A value in the old
JSON form fails the cast: a transaction bound by older code errs rather than
sees more.

A child row's check is one probe of ``notes`` by primary key (the row's own
tenant, project and note), never a hashed read of the visible notes: the
``OFFSET 0`` keeps PostgreSQL from turning the ``EXISTS`` into a hashed
``IN`` (it does so only for a sub-select without one). A statement pays for
the rows it reads, a few microseconds each, whatever the size of the tenant.
Entities keep a check the planner may hash (a probe there walks an entity's
mentions), bound to the current tenant's mentions.

Every check narrows exactly as before: the same notes, through the same
``notes`` policies.

Revision ID: 0020
Revises: 0019
"""

from __future__ import annotations

from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels = None
depends_on = None

SCOPE_FUNCTION = """
CREATE OR REPLACE FUNCTION keepmem_tag_scope() RETURNS text[]
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT nullif(nullif(current_setting('keepmem.tag_scope', true), '')::text[], '{}') $$
"""
# As in 0012 (a sub-select over the JSON list: never inlined).
OLD_SCOPE_FUNCTION = """
CREATE OR REPLACE FUNCTION keepmem_tag_scope() RETURNS text[]
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
        SELECT CASE WHEN coalesce(current_setting('keepmem.tag_scope', true), '') = ''
                    THEN NULL
                    ELSE ARRAY(SELECT jsonb_array_elements_text(
                                   current_setting('keepmem.tag_scope', true)::jsonb))
               END
    $$
"""

# Tables whose rows belong to one note, and the column naming it (0012, 0018).
NOTE_CHILDREN = {
    "note_versions": "note_id",
    "parts": "note_id",
    "embeddings": "note_id",
    "mentions": "note_id",
    "relations": "note_id",
    "blobs": "note_id",
    "jobs": "note_id",
    "changes": "entity_id",
    "note_texts": "note_id",
    "citations": "note_id",
}
PROBE = " OFFSET 0"  # one primary-key probe per row, never a hashed read (see above)
VISIBLE = (
    "EXISTS (SELECT 1 FROM notes n WHERE n.tenant_id = {t}.tenant_id "
    "AND n.project_id = {t}.project_id AND n.id = {t}.{col}{probe})"
)
# An edge's end: a note, or a part of one (ID@P{N}), as in 0018.
END = (
    "EXISTS (SELECT 1 FROM notes n WHERE n.tenant_id = edges.tenant_id "
    "AND n.project_id = edges.project_id "
    "AND n.id IN (edges.{c}, regexp_replace(edges.{c}, '@[pP][{{]?[0-9]{{1,9}}[}}]?$', ''))"
    "{probe})"
)
MENTIONED = (
    "EXISTS (SELECT 1 FROM mentions m WHERE {bound}m.tenant_id = entities.tenant_id "
    "AND m.project_id = entities.project_id AND m.entity_key = entities.key)"
)


def _policies(probe: str, bound: str) -> None:
    """Point the child tables' tag-scope policies at visible notes: probed
    (``probe``) or as the planner likes, entities' mentions bound to the
    current tenant (``bound``) or not."""
    for table, column in NOTE_CHILDREN.items():
        visible = VISIBLE.format(t=table, col=column, probe=probe)
        for name in ("tag_scope", "tag_scope_update", "tag_scope_delete"):
            op.execute(f"ALTER POLICY {name} ON {table} USING ({visible})")
    ends = f"{END.format(c='source_id', probe=probe)} AND {END.format(c='target_id', probe=probe)}"
    op.execute(f"ALTER POLICY tag_scope ON edges USING ({ends})")
    op.execute(f"ALTER POLICY tag_scope ON entities USING ({MENTIONED.format(bound=bound)})")


def upgrade(**_: object) -> None:
    op.execute(SCOPE_FUNCTION)
    _policies(PROBE, "m.tenant_id = keepmem_current_tenant() AND ")


def downgrade(**_: object) -> None:
    _policies("", "")
    op.execute(OLD_SCOPE_FUNCTION)
