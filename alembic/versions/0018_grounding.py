"""Grounding: passages with spans, kept text, citations (``app.grounding``).

* ``parts`` gain ``span_start`` / ``span_end`` (character offsets of a
  passage in its note's normalised text) and ``locator`` (the page, slide,
  sheet or cue times the span covers). Parts made by ``analyze`` have none.
* ``note_texts``: a note's normalised text, compressed, when its project
  keeps text (setting ``keep_text``); its sha256 and the segments (pages …)
  it was read with. Owned by the notes domain, erased with the note (the
  foreign key cascades), counted in the tenant's stored bytes (checked
  against the quota, as a put's versions are).
* ``citations``: what an agent cited (a note's span at one version, the
  exact quote, context, the text's sha256). A citation outlives its note
  so that verify can answer "gone", but not the note's words: deleting the
  note empties its citations' quote and context (a trigger). It goes with
  its project.
* Edges may point at a part (``doc@P3``, provenance): a tag-scoped key sees
  such an edge when the part's note is visible.

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels = None
depends_on = None

TENANT_RULE = "(tenant_id = keepmem_current_tenant() OR keepmem_is_system())"
PROJECT_FK = (
    "FOREIGN KEY (tenant_id, project_id) REFERENCES projects (tenant_id, id) ON DELETE CASCADE"
)
NOTE_FK = (
    "FOREIGN KEY (tenant_id, project_id, note_id) REFERENCES notes (tenant_id, project_id, id) "
    "ON DELETE CASCADE"
)
TABLES = ("note_texts", "citations")
# The note a row belongs to, visible to a tag-scoped key (as in 0012).
VISIBLE = (
    "EXISTS (SELECT 1 FROM notes n WHERE n.tenant_id = {t}.tenant_id "
    "AND n.project_id = {t}.project_id AND n.id = {t}.note_id)"
)
# An edge's end: a note, or a part of one (ID@P{N}).
END = (
    "EXISTS (SELECT 1 FROM notes n WHERE n.tenant_id = edges.tenant_id "
    "AND n.project_id = edges.project_id "
    "AND n.id IN (edges.{c}, regexp_replace(edges.{c}, '@[pP][{{]?[0-9]{{1,9}}[}}]?$', '')))"
)


def upgrade(app_role: str = "keepmem_app", **_: object) -> None:
    op.execute(
        "ALTER TABLE parts ADD COLUMN span_start integer, ADD COLUMN span_end integer, "
        "ADD COLUMN locator jsonb"
    )
    op.execute(
        f"""
        CREATE TABLE note_texts (
            tenant_id uuid NOT NULL,
            project_id uuid NOT NULL,
            note_id text NOT NULL,
            sha256 text NOT NULL,
            chars integer NOT NULL,
            data bytea NOT NULL,
            segments jsonb NOT NULL DEFAULT '[]'::jsonb,
            updated_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (tenant_id, project_id, note_id),
            {NOTE_FK}
        )
        """
    )
    op.execute(
        f"""
        CREATE TABLE citations (
            tenant_id uuid NOT NULL,
            project_id uuid NOT NULL,
            id text NOT NULL,
            note_id text NOT NULL,
            version integer NOT NULL,
            part_num integer,
            span_start integer NOT NULL,
            span_end integer NOT NULL,
            quote text NOT NULL,
            before text NOT NULL DEFAULT '',
            after text NOT NULL DEFAULT '',
            text_sha256 text NOT NULL,
            source_uri text,
            locator jsonb NOT NULL DEFAULT '{{}}'::jsonb,
            created_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (tenant_id, project_id, id),
            {PROJECT_FK}
        )
        """
    )
    op.execute(
        "CREATE INDEX ix_citations_note ON citations (tenant_id, project_id, note_id, created_at)"
    )
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(
            f"CREATE POLICY tenant_isolation ON {table} USING {TENANT_RULE} "
            f"WITH CHECK {TENANT_RULE}"
        )
        for role in (app_role, f"{app_role}_scoped"):
            op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO {role}")
        scoped = f"{app_role}_scoped"
        visible = VISIBLE.format(t=table)
        op.execute(
            f"CREATE POLICY tag_scope ON {table} AS RESTRICTIVE FOR SELECT TO {scoped} "
            f"USING ({visible})"
        )
        for command in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE POLICY tag_scope_{command.lower()} ON {table} AS RESTRICTIVE "
                f"FOR {command} TO {scoped} USING ({visible})"
            )
    # Kept text counts towards the tenant's stored bytes, checked like a
    # version's (a put makes it); system documents count towards nothing.
    op.execute(
        """
        CREATE FUNCTION keepmem_count_texts() RETURNS trigger
            LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp
            AS $$
            BEGIN
                IF left(coalesce(NEW.note_id, OLD.note_id), 1) = '.' THEN
                    RETURN NULL;
                END IF;
                IF TG_OP = 'INSERT' THEN
                    PERFORM keepmem_count(NEW.tenant_id, 0, octet_length(NEW.data)::bigint, true);
                ELSIF TG_OP = 'DELETE' THEN
                    PERFORM keepmem_count(OLD.tenant_id, 0, -octet_length(OLD.data)::bigint, false);
                ELSE
                    PERFORM keepmem_count(NEW.tenant_id, 0,
                        octet_length(NEW.data)::bigint - octet_length(OLD.data)::bigint,
                        octet_length(NEW.data) > octet_length(OLD.data));
                END IF;
                RETURN NULL;
            END
            $$
        """
    )
    op.execute(
        "CREATE TRIGGER count_usage AFTER INSERT OR DELETE OR UPDATE OF data ON note_texts "
        "FOR EACH ROW EXECUTE FUNCTION keepmem_count_texts()"
    )
    # A deleted note's words leave its citations too: they keep what they
    # cited (note, span, hash: verify answers "gone") but not the quote.
    op.execute(
        """
        CREATE FUNCTION keepmem_citations_forget() RETURNS trigger
            LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp
            AS $$
            BEGIN
                UPDATE citations SET quote = '', before = '', after = ''
                 WHERE tenant_id = OLD.tenant_id AND project_id = OLD.project_id
                   AND note_id = OLD.id;
                RETURN NULL;
            END
            $$
        """
    )
    op.execute(
        "CREATE TRIGGER citations_forget AFTER DELETE ON notes "
        "FOR EACH ROW EXECUTE FUNCTION keepmem_citations_forget()"
    )
    scoped = f"{app_role}_scoped"
    op.execute("DROP POLICY IF EXISTS tag_scope ON edges")
    op.execute(
        f"CREATE POLICY tag_scope ON edges AS RESTRICTIVE FOR SELECT TO {scoped} "
        f"USING ({END.format(c='source_id')} AND {END.format(c='target_id')})"
    )


def downgrade(app_role: str = "keepmem_app", **_: object) -> None:
    scoped = f"{app_role}_scoped"
    op.execute("DROP POLICY IF EXISTS tag_scope ON edges")
    both = (
        "EXISTS (SELECT 1 FROM notes n WHERE n.tenant_id = edges.tenant_id "
        "AND n.project_id = edges.project_id AND n.id = edges.source_id) AND "
        "EXISTS (SELECT 1 FROM notes n WHERE n.tenant_id = edges.tenant_id "
        "AND n.project_id = edges.project_id AND n.id = edges.target_id)"
    )
    op.execute(
        f"CREATE POLICY tag_scope ON edges AS RESTRICTIVE FOR SELECT TO {scoped} USING ({both})"
    )
    op.execute("DROP TRIGGER IF EXISTS citations_forget ON notes")
    op.execute("DROP FUNCTION IF EXISTS keepmem_citations_forget()")
    for table in reversed(TABLES):
        op.execute(f"DROP TABLE IF EXISTS {table}")
    op.execute("DROP FUNCTION IF EXISTS keepmem_count_texts()")
    op.execute(
        "ALTER TABLE parts DROP COLUMN span_start, DROP COLUMN span_end, DROP COLUMN locator"
    )
