"""Citus readiness, checked (issue 38): the schema, and the statements the app
really issues, are what distributing every tenant table by ``tenant_id`` needs.
Citus is not installable here, so what it requires is checked mechanically:

- the catalog: every table is classified (a tenant table has ``tenant_id``; a
  reference table is named in ``REFERENCE_TABLES`` with why); a tenant
  table's primary key leads with ``tenant_id``, its unique indexes include
  it, its foreign keys to tenant tables carry it on both sides, and no
  reference table points at a tenant table;
- the statements, read from pg_stat_statements while a workload runs through
  the real API and the worker's code for several tenants: each one touching
  a tenant table must pin it to one tenant in its own text (``tenant_id``
  compared with a value, or joined on ``tenant_id`` to a pinned table).
  Row-level security keeps a statement without one correct, but Citus routes
  by the text before any policy runs: without it, every shard is asked.

Offenders are listed in ``SCHEMA_OFFENDERS`` and ``STATEMENT_OFFENDERS`` with
their reasons; an entry that matches nothing any more fails too, so the lists
only shrink. deploy/SCALING.md says how the distribution would be declared.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from app import tenancy
from app.cli.embedded import DATABASE, SUPERUSER
from app.notes import service as notes
from app.pipeline import dispatcher
from app.tenants import service as projects
from tests.conftest import ADMIN_TOKEN, MakeTenant, Stack, Tenant
from tests.test_pipeline import run_all

# -- what is classified by hand -----------------------------------------------------

#: Tables not distributed by tenant, each with why. Citus copies a reference
#: table to every node: it suits small tables read everywhere and rows found
#: by a credential before the tenant is known. A new table must either carry
#: ``tenant_id`` (and pass the rules) or be named here.
REFERENCE_TABLES: dict[str, str] = {
    "tenants": "one row per tenant, read by every credential check; every tenant "
    "table's foreign key points at it",
    "alembic_version": "the schema's migration head",
    "oauth_keys": "the server's token-signing keys: no tenant",
    "oauth_clients": "public (dynamically registered) clients have no tenant: tenant_id "
    "is NULL, which a distribution column may not be",
    "oauth_codes": "redeemed by hash at /oauth/token before the tenant is known; "
    "short-lived, written at sign-in rates",
    "oauth_grants": "found by grant id (access tokens) or refresh hash before the "
    "tenant is known; written at token-refresh rates",
    "oauth_issuers": "found by an incoming token's (issuer, audience) before the tenant "
    "is known; a handful per tenant",
}

#: Constraints of tenant tables Citus would refuse, by constraint or unique
#: index name, each with its reason and the way out.
SCHEMA_OFFENDERS: dict[str, str] = {
    "api_keys_key_hash_key": "a key is found by its hash before the tenant is known, so "
    "the hash is unique over all tenants; on Citus that lookup and its uniqueness move "
    "to a reference table key_hash -> tenant_id, and this becomes UNIQUE (tenant_id, "
    "key_hash)",
}

#: Statements that touch a tenant table without naming the tenant, on
#: purpose: a regular expression searched in the normalized statement ->
#: why. Each becomes a query to every shard on Citus (deploy/SCALING.md).
STATEMENT_OFFENDERS: dict[str, str] = {
    # the API
    r"FROM keepmem_resolve_api_key\(": "auth: a key is resolved by its hash before the "
        "tenant is known (per key, then cached); Citus: a reference table key_hash -> "
        "tenant_id, then a routed read",
    # the worker's maintenance (app/pipeline/dispatcher.py), cross-tenant by design
    r"GROUP BY jobs\.tenant_id ORDER BY min\(jobs\.next_run_at\)":
        "dispatch: the tenants with ready jobs (take_ready_fairly)",
    r"^SELECT jobs\.tenant_id, CASE WHEN": "dispatch: jobs in flight per tenant and lane "
        "(inflight_by_lane)",
    r"jobs\.heartbeat_at < now\(\)": "sweep: every tenant's stale claims back to pending "
        "(sweep_stale)",
    r"SELECT embeddings\.note_id FROM embeddings WHERE embeddings\.tenant_id = notes\.":
        "reconcile: notes lacking the current model's vector (notes_missing_model)",
    r"FROM projects p WHERE \(p\.term_stats_at IS NULL": "reconcile: projects whose word "
        "counts are missing or old (projects_needing_term_stats)",
    r"FROM agent_sessions WHERE checkpoint_seq < next_seq": "reconcile: coding-agent "
        "sessions gone quiet (idle_sessions)",
    r"FROM notes WHERE notes\.expires_at IS NOT NULL": "reconcile: projects holding "
        "expired notes (projects_with_due_notes)",
    r"FROM projects WHERE projects\.retention_days IS NOT NULL": "reconcile: projects past "
        "their retention (projects_with_due_notes)",
    r"keepmem_prune_audit\(": "reconcile: the audit sweeper passes a NULL tenant (every "
        "tenant's old entries); erasure passes its tenant, which create_distributed_function "
        "could route, but both calls read the same",
    r"^DELETE FROM usage_daily WHERE day < \?$": "reconcile: every tenant's daily usage "
        "counts past 40 days (drop_days_before)",
    r"FROM webhooks WHERE webhooks\.active": "webhook hand-off: webhooks with undelivered "
        "changes (due)",
    # `keepmem up` / `keepmem migrate` (app/accounts/service.py), once per start
    r"FROM projects WHERE \(SELECT count\(\*\)": "start: the projects lacking one of "
        "keep's schema docs (projects_lacking)",
}  # fmt: skip

#: Tables the workload must reach, so an empty capture cannot pass.
MUST_TOUCH = {
    "notes", "note_versions", "embeddings", "entities", "mentions", "jobs", "changes",
    "citations", "agent_sessions", "memory_threads", "projects", "api_keys",
}  # fmt: skip


# -- the catalog's rules -------------------------------------------------------------

TABLES_SQL = """
SELECT c.relname, EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = c.oid
                             AND a.attname = 'tenant_id' AND NOT a.attisdropped)
  FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p')
"""
# The columns of a key, in order (an index's expression column reads as NULL).
_COLUMNS = """array(SELECT a.attname FROM unnest({keys}) WITH ORDINALITY k(attnum, n)
    LEFT JOIN pg_attribute a ON a.attrelid = {rel} AND a.attnum = k.attnum
    WHERE k.n <= {count} ORDER BY k.n)"""
# Primary keys and unique constraints are unique indexes too.
UNIQUE_SQL = f"""
SELECT c.relname, i.indexrelid::regclass::text, i.indisprimary,
       {_COLUMNS.format(keys="i.indkey", rel="c.oid", count="i.indnkeyatts")}
  FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
 WHERE c.relnamespace = 'public'::regnamespace AND i.indisunique
"""
FOREIGN_KEYS_SQL = f"""
SELECT f.conname, f.conrelid::regclass::text, f.confrelid::regclass::text,
       {_COLUMNS.format(keys="f.conkey", rel="f.conrelid", count="cardinality(f.conkey)")},
       {_COLUMNS.format(keys="f.confkey", rel="f.confrelid", count="cardinality(f.confkey)")}
  FROM pg_constraint f WHERE f.contype = 'f' AND f.connamespace = 'public'::regnamespace
"""
# Functions a statement can call (not triggers), their bodies, and whether
# they take the tenant as an argument (Citus routes such a call with
# create_distributed_function(..., distribution_arg_name => 'p_tenant')).
FUNCTIONS_SQL = """
SELECT p.proname, p.prosrc, coalesce('p_tenant' = ANY (p.proargnames), false)
  FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
 WHERE p.pronamespace = 'public'::regnamespace AND l.lanname IN ('sql', 'plpgsql')
   AND p.prorettype <> 'trigger'::regtype
"""


@dataclass
class Catalog:
    tables: dict[str, bool]  # name -> has a tenant_id column
    unique: list[tuple[str, str, bool, list[str | None]]]
    fks: list[tuple[str, str, str, list[str], list[str]]]
    #: functions reading or writing tenant tables without a tenant argument
    unrouted_functions: set[str] = field(default_factory=set)

    @property
    def tenant_tables(self) -> set[str]:
        return {t for t, has in self.tables.items() if has and t not in REFERENCE_TABLES}


async def read_catalog(owner_url: str) -> Catalog:
    engine = create_async_engine(owner_url)
    try:
        async with engine.connect() as conn:

            async def rows(sql: str) -> list[Any]:
                return [tuple(r) for r in (await conn.execute(text(sql))).all()]

            found = Catalog(
                tables=dict(await rows(TABLES_SQL)),
                unique=await rows(UNIQUE_SQL),
                fks=await rows(FOREIGN_KEYS_SQL),
            )
            for name, body, has_tenant_argument in await rows(FUNCTIONS_SQL):
                # a NULL tenant argument meaning "every tenant" routes nowhere
                routed = has_tenant_argument and not re.search(r"p_tenant\s+IS\s+NULL", body)
                if not routed and touched_tables(normalize(body)) & found.tenant_tables:
                    found.unrouted_functions.add(name)
            return found
    finally:
        await engine.dispose()


def schema_violations(catalog: Catalog) -> dict[str, str]:
    """Each constraint Citus would refuse with the table distributed by
    tenant_id (and the reference tables as named): name -> what is wrong."""
    tenant = catalog.tenant_tables
    found: dict[str, str] = {}
    with_pk = set()
    for table, index, primary, columns in catalog.unique:
        if table not in tenant:
            continue
        if primary:
            with_pk.add(table)
            if columns[:1] != ["tenant_id"]:
                found[index] = f"primary key of {table} {columns} does not lead with tenant_id"
        elif "tenant_id" not in columns:
            found[index] = f"unique index on {table} {columns} lacks tenant_id"
    for table in tenant - with_pk:
        found[f"{table} (no primary key)"] = f"{table} has no primary key"
    for name, table, target, columns, target_columns in catalog.fks:
        if table in tenant and target in tenant:
            pairs = set(zip(columns, target_columns, strict=True))
            if ("tenant_id", "tenant_id") not in pairs:
                found[name] = f"{table} -> {target} {columns} does not join on tenant_id"
        elif table not in tenant and target in tenant:
            found[name] = f"reference table {table} points at tenant table {target}"
    return found


@pytest.fixture
async def catalog(stack: Stack) -> Catalog:
    return await read_catalog(stack.owner_url)


def test_every_table_is_classified(catalog: Catalog) -> None:
    unnamed = {t for t, has in catalog.tables.items() if not has} - set(REFERENCE_TABLES)
    assert not unnamed, (
        f"tables without tenant_id must be named in REFERENCE_TABLES, with why: {unnamed}"
    )
    assert set(REFERENCE_TABLES) <= set(catalog.tables), "a reference table no longer exists"
    assert len(catalog.tenant_tables) >= 25


def test_tenant_tables_keys_and_foreign_keys_carry_tenant_id(catalog: Catalog) -> None:
    found = schema_violations(catalog)
    new = {name: what for name, what in found.items() if name not in SCHEMA_OFFENDERS}
    assert not new, f"Citus would refuse these (fix, or list with a reason): {new}"
    gone = set(SCHEMA_OFFENDERS) - set(found)
    assert not gone, f"fixed: remove from SCHEMA_OFFENDERS: {gone}"


def test_the_schema_rules_can_fail() -> None:
    bad = Catalog(
        tables={"a": True, "b": True, "tenants": False, "lost": True},
        unique=[
            ("a", "a_pkey", True, ["id", "tenant_id"]),
            ("a", "a_code_key", False, ["code"]),
            ("b", "b_pkey", True, ["tenant_id", "id"]),
            ("tenants", "tenants_pkey", True, ["id"]),
        ],
        fks=[
            ("b_a_fkey", "b", "a", ["a_id"], ["id"]),
            ("b_tenant_fkey", "b", "tenants", ["tenant_id"], ["id"]),
        ],
    )
    found = set(schema_violations(bad))
    assert found == {"a_pkey", "a_code_key", "lost (no primary key)", "b_a_fkey"}


# -- statements: normalizing and reading them -------------------------------------

_COMMENT = re.compile(r"--[^\n]*|/\*.*?\*/", re.S)
_STRING = re.compile(r"(?:E|U&)?'(?:[^']|'')*'")
_PARAM = re.compile(r"\$\d+")
_NUMBER = re.compile(r"(?<![\w$.])\d+(?:\.\d+)?(?![\w.])")
_ITEM = r"\?(?:::[\w\[\] ]+?)?(?:\s+COLLATE\s+\"\w+\")?"
_LIST = re.compile(rf"{_ITEM}(?:\s*,\s*{_ITEM})+(?=\s*\))")
_ROWS = re.compile(r"(\((?:[^()]|\([^()]*\))*\))(?:\s*,\s*\((?:[^()]|\([^()]*\))*\))+")


def normalize(sql: str) -> str:
    """One statement's shape: no comments, literals and parameters as ``?``,
    value lists and VALUES rows collapsed, one space between tokens."""
    sql = _COMMENT.sub(" ", sql)
    sql = _STRING.sub("?", sql)
    sql = _PARAM.sub("?", sql)
    sql = _NUMBER.sub("?", sql)
    sql = " ".join(sql.split()).rstrip(";").strip()
    sql = _LIST.sub("?, ...", sql)
    return _ROWS.sub(r"\1, ...", sql)


_SUBQUERY_START = re.compile(r"\s*(SELECT|WITH|INSERT|UPDATE|DELETE)\b", re.I)


@dataclass
class Level:
    """One query level: its own text (nested subqueries cut out, other
    parentheses kept) and its enclosing level."""

    text: str
    parent: int | None


def levels(sql: str) -> list[Level]:
    """The statement's query levels, outermost first. A parenthesis opening
    a subquery starts a level; any other (a list, a tuple, a call) stays in
    its level's text."""
    out = [Level("", None)]
    texts: list[list[str]] = [[]]
    stack = [(0, False)]  # (level, opened a subquery)
    for i, ch in enumerate(sql):
        level = stack[-1][0]
        if ch == "(" and _SUBQUERY_START.match(sql, i + 1):
            texts[level].append(" (SUBQUERY) ")
            out.append(Level("", level))
            texts.append([])
            stack.append((len(out) - 1, True))
        elif ch == "(":
            texts[level].append(ch)
            stack.append((level, False))
        elif ch == ")" and len(stack) > 1:
            if not stack.pop()[1]:
                texts[level].append(ch)
        else:
            texts[level].append(ch)
    for found, own in zip(out, texts, strict=True):
        found.text = "".join(own)
    return out


_KEYWORDS = {
    "where", "set", "on", "join", "left", "right", "inner", "full", "cross", "using",
    "order", "group", "limit", "values", "select", "default", "returning", "with",
    "as", "natural", "lateral", "for", "offset", "union", "except", "intersect",
    "window", "having", "fetch", "and", "or", "not", "tablesample", "only",
}  # fmt: skip
_TABLE_REF = re.compile(
    r"\b(?:FROM|JOIN|UPDATE|INTO|USING)\s+(?:ONLY\s+)?(?:public\.)?\"?(\w+)\"?"
    r"(?=(?:\s+(?:AS\s+)?(\w+))?)",  # the alias, not consumed: it may be a JOIN
    re.I,
)


def touched_tables(sql: str) -> set[str]:
    """Tables a statement (normalized) names after FROM, JOIN, UPDATE, INTO or USING."""
    return {m.group(1).lower() for m in _TABLE_REF.finditer(sql)}


_TENANT_COLUMN = re.compile(r"(?:\b(\w+)\.)?\btenant_id\b", re.I)
_ANCHOR = re.compile(r"\s*(?:\?|CAST\s*\(|ANY\s*\(|\((?!\s*SUBQUERY))", re.I)
_COMPARED = re.compile(r"\s*(?:=|IN\b|IS\s+NOT\s+DISTINCT\s+FROM\b)\s*", re.I)
_QUALIFIED = re.compile(r"\s*(\w+)\.tenant_id\b", re.I)
_INSERT = re.compile(r"\bINSERT\s+INTO\s+(?:public\.)?(\w+)(?:\s+AS\s+(\w+))?\s*\(([^)]*)\)", re.I)


def unpinned(sql: str, tenant_tables: set[str], unrouted_functions: set[str]) -> set[str]:
    """The tenant tables (and tenant-reading functions without a tenant
    argument) a normalized statement reaches without pinning them to one
    tenant in its own text. A table is pinned when its tenant_id is compared
    with a value (a parameter, a literal, a list of them), or equated
    with the tenant_id of a pinned table (a join on tenant_id, USING
    (tenant_id, ...)); an INSERT's target when tenant_id is among its columns."""
    tree = levels(sql)
    refs: dict[tuple[int, str], str] = {}  # (level, alias) -> table
    for n, level in enumerate(tree):
        for m in _TABLE_REF.finditer(level.text):
            table = m.group(1).lower()
            if table not in tenant_tables:
                continue
            alias = (m.group(2) or "").lower()
            refs[(n, table if not alias or alias in _KEYWORDS else alias)] = table

    def resolve(n: int | None, alias: str | None) -> list[tuple[int, str]]:
        """The references an (un)qualified tenant_id at level n means."""
        while n is not None:
            here = [k for k in refs if k[0] == n and (alias is None or k[1] == alias)]
            if here:
                return here
            n = tree[n].parent
        return []

    pinned: set[tuple[int, str]] = set()
    links: list[tuple[tuple[int, str], tuple[int, str]]] = []
    for n, level in enumerate(tree):
        own = level.text
        insert = _INSERT.search(own)
        if insert and "tenant_id" in insert.group(3).lower():
            pinned.add((n, (insert.group(2) or insert.group(1)).lower()))
        if re.search(r"\bUSING\s*\([^)]*\btenant_id\b", own, re.I):
            same = [k for k in refs if k[0] == n]
            links += [(a, b) for a in same for b in same if a != b]
        for m in _TENANT_COLUMN.finditer(own):
            here = resolve(n, m.group(1).lower() if m.group(1) else None)
            after, before = own[m.end() :], own[: m.start()]
            other: str | None = None
            anchored = False
            compared = _COMPARED.match(after)
            if compared:
                rest = after[compared.end() :]
                anchored = bool(_ANCHOR.match(rest))
                q = _QUALIFIED.match(rest)
                other = q.group(1).lower() if q else None
            elif re.search(r"(?:=|\bIN)\s*$", before, re.I):
                ahead = re.search(r"(?:(\w+)\.)?(\w+|\?|\))\s*(?:=|\bIN)\s*$", before, re.I)
                if ahead and ahead.group(2) == "tenant_id" and ahead.group(1):
                    other = ahead.group(1).lower()
                else:
                    anchored = bool(ahead and ahead.group(2) in {"?", ")"})
            elif re.match(r"[^()]*\)\s*(?:=|IN\b)", after, re.I) and "(" in before:
                anchored = True  # (tenant_id, project_id, ...) = / IN (...)
            if anchored:
                pinned.update(here)
            if other is not None:
                links += [(a, b) for a in here for b in resolve(n, other)]
    while grown := {y for a, b in links for x, y in ((a, b), (b, a)) if x in pinned} - pinned:
        pinned |= grown
    missing = {refs[k] for k in refs if k not in pinned}
    calls = {f for f in unrouted_functions if re.search(rf"\b{f}\s*\(", sql, re.I)}
    return missing | {f"{f}()" for f in calls}


def test_the_statement_check_can_fail() -> None:
    tables = {"notes", "parts", "api_keys", "jobs"}
    cases = {
        "SELECT * FROM notes WHERE id = $1": {"notes"},
        "SELECT * FROM notes n JOIN parts p ON p.tenant_id = n.tenant_id AND p.note_id = n.id "
        "WHERE n.tenant_id = $1": set(),
        "SELECT * FROM notes n JOIN parts p ON p.note_id = n.id WHERE n.tenant_id = $1": {"parts"},
        "SELECT k.id FROM api_keys k JOIN tenants t ON t.id = k.tenant_id "
        "WHERE k.key_hash = $1": {"api_keys"},
        "INSERT INTO jobs (tenant_id, project_id, kind) VALUES ($1, $2, 'embed')": set(),
        "UPDATE jobs SET status = 'x' WHERE id IN (SELECT id FROM jobs WHERE status = 'y')":
            {"jobs"},
        "UPDATE jobs SET status = 'x' WHERE tenant_id = $1 AND id = ANY($2)": set(),
        "DELETE FROM parts WHERE (tenant_id, project_id, note_id) = ($1, $2, $3)": set(),
        "SELECT 1 FROM notes WHERE tenant_id = $1 AND EXISTS "
        "(SELECT 1 FROM parts p WHERE p.note_id = notes.id)": {"parts"},
        "SELECT 1 FROM notes n JOIN parts USING (tenant_id, project_id) WHERE n.tenant_id = $1":
            set(),
        "SELECT resolve_key($1)": {"resolve_key()"},
    }  # fmt: skip
    for sql, expected in cases.items():
        assert unpinned(normalize(sql), tables, {"resolve_key"}) == expected, sql


# -- statements: capturing them ------------------------------------------------------

# The suite's PostgreSQL preloads pg_stat_statements (tests/conftest.py). It
# keeps each statement's text as the server received it (literals as $n),
# per database and role; the owner's own statements (migrations, these
# catalog reads) are left out.
STATS_SQL = """
SELECT s.query, sum(s.calls)::bigint
  FROM pg_stat_statements s
 WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = :db)
   AND s.userid <> (SELECT oid FROM pg_roles WHERE rolname = current_user)
 GROUP BY s.query
"""


@contextlib.asynccontextmanager
async def statement_stats(stack: Stack) -> AsyncIterator[Callable[[], Awaitable[Counter[str]]]]:
    """Statistics reset on entry; the callable gives the statements issued
    in the suite's database since, with how often each ran."""
    engine = create_async_engine(stack.pg.url(SUPERUSER, database="postgres"))

    async def read() -> Counter[str]:
        async with engine.connect() as conn:
            rows = (await conn.execute(text(STATS_SQL), {"db": DATABASE})).all()
        return Counter({query: int(calls) for query, calls in rows})

    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE EXTENSION IF NOT EXISTS pg_stat_statements"))
            await conn.execute(text("SELECT pg_stat_statements_reset()"))
        yield read
    finally:
        await engine.dispose()


# -- the workload ----------------------------------------------------------------------

LONG = (
    "Melanie Ortiz flew to Lisbon with her sister last spring. "
    "Melanie Ortiz works for Google and repaired the lighthouse fog horn with a bicycle chain. "
) * 6
_EVENT = {"platform": "claude-code", "session_id": "{sid}", "cwd": "/home/dev/shop"}

#: One tenant's day: (method, path, body or query, name to keep the answer's
#: id under), or WORK: run the tenant's pending jobs as a worker would.
WORK = "work"
STEPS: list[Any] = [
    ("PATCH", "/v1/settings", {"keep_text": True}),
    ("POST", "/v1/notes", {"id": "trip", "content": LONG}),
    ("POST", "/v1/notes", {"id": "dinner", "content": "Dinner with Melanie Ortiz.",
                           "tags": {"topic": "food"}}),
    ("POST", "/v1/notes/batch", {"notes": [{"id": f"b{i}", "content": f"Garden note {i}."}
                                           for i in range(5)]}),
    ("POST", "/v1/notes", {"id": "b1", "content": "Changed."}),
    WORK,
    ("GET", "/v1/notes/trip", None),
    ("GET", "/v1/notes", {"limit": 10}),
    ("GET", "/v1/notes/b1/versions", None),
    ("GET", "/v1/notes/trip/parts", None),
    ("PATCH", "/v1/notes/dinner/tags", {"set": {"mood": "good"}}),
    ("POST", "/v1/search", {"query": "fog horn bicycle chain", "limit": 5}),
    ("POST", "/v1/search", {"query": "flight to Lisbon", "deep": True, "deep_follow_depth": 2}),
    ("POST", "/v1/search", {"query": "gardens", "tags": {"topic": "food"}, "stages": "text"}),
    ("POST", "/v1/search", {"similar_to": "trip"}),
    ("POST", "/v1/search", {"query": "fog horn repaired", "limit": 3, "cite": True}),
    ("POST", "/v1/citations", {"note": "trip", "quote": "bicycle chain"}, "cited"),
    ("GET", "/v1/citations", None),
    ("GET", "/v1/citations/{cited}", None),
    ("GET", "/v1/notes/trip/entities", None),
    ("GET", "/v1/entities", {"name": "mel"}),
    ("GET", "/v1/graph/walk", {"note": "trip", "depth": 2}),
    ("GET", "/v1/graph/stats", None),
    # memories: a conversation's messages become facts
    ("POST", "/v1/threads/th-1/messages", {"user_id": "alice", "messages": [
        {"role": "user", "content": "I moved to Porto and I love surfing."}]}),
    WORK,
    WORK,
    ("GET", "/v1/memories", {"user_id": "alice"}),
    ("POST", "/v1/memories", {"statement": "Alice prefers tea.", "user_id": "alice"}),
    # coding-agent sessions
    ("POST", "/v1/sessions/events", {"events": [
        _EVENT | {"kind": "session_start", "source": "startup"},
        _EVENT | {"kind": "prompt", "prompt": "Fix the cart please"}]}),
    WORK,
    WORK,
    ("GET", "/v1/sessions", None),
    ("GET", "/v1/sessions/{sid}/timeline", None),
    # the rest of a tenant's day
    ("GET", "/v1/jobs", None),
    ("GET", "/v1/usage", None),
    ("GET", "/v1/audit", None),
    ("GET", "/v1/export/changes", None),
    ("POST", "/v1/keys", {"name": "reader"}, "key"),
    ("GET", "/v1/keys", None),
    ("DELETE", "/v1/keys/{key}", None),
    ("DELETE", "/v1/citations/{cited}", None),
    ("DELETE", "/v1/notes/b2", None),
    ("DELETE", "/v1/notes/b1", None),  # reverts to its first version
    WORK,
]  # fmt: skip


class NoQueue:
    """Redis for the dispatcher: takes the jobs, runs nothing."""

    async def enqueue_job(self, *args: Any, **kwargs: Any) -> None:
        return None


async def workload(client: httpx.AsyncClient, make_pipeline: Any, tenants: list[Tenant]) -> None:
    pipeline = make_pipeline()
    for t in tenants:
        names = {"sid": f"s-{uuid.uuid4().hex[:8]}"}
        for step in STEPS:
            if step == WORK:
                await run_all(pipeline, client, t)
                continue
            method, path, given, *keep = step
            body = json.loads(json.dumps(given).replace("{sid}", names["sid"]))
            where = {"params": body} if method == "GET" else {"json": body}
            r = await client.request(method, path.format(**names), headers=t.headers, **where)
            assert r.is_success, (method, path, r.status_code, r.text)
            if keep:
                names[keep[0]] = r.json()["id"]
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    r = await client.get(f"/v1/admin/tenants/{tenants[0].id}/usage", headers=admin)
    assert r.is_success, r.text
    # the worker's cross-tenant maintenance, as its loop runs it
    await dispatcher.sweep(pipeline)
    await dispatcher.reconcile(pipeline)
    await dispatcher.hand_off_webhooks(pipeline)
    # `keepmem up` / `keepmem migrate` at start: the projects lacking a schema
    # doc (only read here: seeding would write into the whole suite's projects)
    async with tenancy.system_transaction(pipeline.db) as session:
        await projects.projects_lacking(session, notes.system_doc_ids())
    # (room for more in flight than the whole suite leaves dispatched and
    # unfinished: with none, the dispatcher stops before reading the tenants)
    await dispatcher.dispatch(make_pipeline(dispatch_max_inflight=1_000_000), NoQueue())


async def test_every_statement_on_a_tenant_table_names_the_tenant(
    stack: Stack, client: httpx.AsyncClient, make_tenant: MakeTenant,
    make_pipeline: Any, catalog: Catalog,
) -> None:  # fmt: skip
    tenants = [await make_tenant() for _ in range(3)]
    async with statement_stats(stack) as read:
        await workload(client, make_pipeline, tenants)
        captured = await read()
    shapes: Counter[str] = Counter()
    for statement, calls in captured.items():
        shapes[normalize(statement)] += calls
    touched: set[str] = set()
    offenders: dict[str, tuple[int, set[str]]] = {}
    for shape, count in shapes.items():
        touched |= touched_tables(shape) & catalog.tenant_tables
        missing = unpinned(shape, catalog.tenant_tables, catalog.unrouted_functions)
        if missing:
            offenders[shape] = (count, missing)
    assert MUST_TOUCH <= touched, f"the workload missed {MUST_TOUCH - touched}"
    listed = {
        shape: what
        for shape, what in offenders.items()
        if not any(re.search(p, shape) for p in STATEMENT_OFFENDERS)
    }
    report = "\n".join(
        f"{count:5d}x {sorted(missing)}: {shape}"
        for shape, (count, missing) in sorted(listed.items(), key=lambda kv: -kv[1][0])
    )
    assert not listed, (
        f"{len(listed)} statement shapes reach a tenant table without its tenant "
        f"(of {len(shapes)} captured):\n{report}"
    )
    unused = [p for p in STATEMENT_OFFENDERS if not any(re.search(p, s) for s in offenders)]
    assert not unused, f"no longer issued or fixed: remove from STATEMENT_OFFENDERS: {unused}"
