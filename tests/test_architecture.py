"""The house rules: SQL only in repositories, one owner per table, no import
loop, packages importing down the layers, tenancy in one module; app never
imports worker."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app"
SQL_NAMES = {"select", "insert", "update", "delete", "text", "func", "literal_column"}
# Infrastructure allowed to speak SQL besides repositories: the engine
# (db.py), the RLS settings (tenancy.py) and the ORM row definitions (models.py).
SQL_ALLOWED = {"db.py", "tenancy.py", "models.py", "repository.py", "migrate.py"}
# The migrations (alembic/, shipped in the wheel as app/migrations) are the
# schema's history: SQL by nature, never edited once released, and outside
# app/ in the checkout; a built tree's copy is left out all the same.
MIGRATIONS = APP / "migrations"


def _sources(pattern: str = "*.py") -> list[Path]:
    return [p for p in APP.rglob(pattern) if MIGRATIONS not in p.parents]


def _imports(path: Path) -> list[tuple[str, set[str]]]:
    tree = ast.parse(path.read_text())
    out: list[tuple[str, set[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.module, {a.name for a in node.names}))
        elif isinstance(node, ast.Import):
            out.extend((a.name, set()) for a in node.names)
    return out


def test_sql_only_in_repositories() -> None:
    offenders = []
    for path in _sources():
        if path.name in SQL_ALLOWED or path.parent.name == "repository":
            continue
        for module, names in _imports(path):
            if module.startswith("sqlalchemy") and names & SQL_NAMES:
                offenders.append(f"{path.relative_to(ROOT)} imports {sorted(names & SQL_NAMES)}")
            if module == "sqlalchemy.dialects.postgresql" and "insert" in names:
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_app_never_imports_worker() -> None:
    offenders = [
        str(p.relative_to(ROOT))
        for p in _sources()
        for module, _ in _imports(p)
        if module == "worker" or module.startswith("worker.")
    ]
    assert offenders == []


def test_services_do_not_import_fastapi_or_arq_or_commit() -> None:
    for path in _sources("service.py"):
        source = path.read_text()
        for module, _ in _imports(path):
            assert not module.startswith(("fastapi", "starlette", "arq")), path
        assert ".commit(" not in source, path


def test_every_route_passes_the_input_door() -> None:
    """No route can skip the checks on request text and numbers (app.wire)."""
    from fastapi.routing import APIRoute

    from app.main import create_app
    from app.settings import Settings
    from app.wire import CheckedRoute

    def flat(routes: list) -> list:
        out = []
        for route in routes:
            inner = getattr(route, "original_router", None)  # an included router
            out += flat(inner.routes) if inner is not None else [route]
        return out

    routes = [r for r in flat(create_app(Settings()).routes) if isinstance(r, APIRoute)]
    assert len(routes) > 30
    unchecked = [r.path for r in routes if not isinstance(r, CheckedRoute)]
    # /docs pages are HTML for people, not API input
    assert [p for p in unchecked if not p.startswith("/docs")] == []


# -- one owner per table -------------------------------------------------------------

# Which repository module writes each mapped class (INSERT, UPDATE, DELETE or
# session.add), and the named columns another package's repository may
# update: a project's retention (retention) and the full-text statistics
# (search's full-text stage keeps them).
OWNERS = {
    "Note": "app/notes/repository/notes.py",
    "NoteVersion": "app/notes/repository/versions.py",
    "Part": "app/notes/repository/parts.py",
    "NoteText": "app/notes/repository/texts.py",
    "Citation": "app/grounding/repository.py",
    "Embedding": "app/notes/repository/vectors.py",
    "Edge": "app/notes/repository/edges.py",
    "Change": "app/notes/repository/changes.py",
    "GraphEntity": "app/graph/repository.py",
    "Mention": "app/graph/repository.py",
    "GraphRelation": "app/graph/repository.py",
    "Blob": "app/ingest/repository.py",
    "Job": "app/jobs/repository.py",
    "Webhook": "app/events/repository.py",
    "AuditLog": "app/audit/repository.py",
    "ApiKey": "app/auth/repository.py",
    "Tenant": "app/tenants/repository.py",
    "Project": "app/tenants/repository.py",
    "TermStat": "app/search/fulltext/repository.py",
    "OAuthKey": "app/oauth/repository.py",
    "OAuthClient": "app/oauth/repository.py",
    "OAuthCode": "app/oauth/repository.py",
    "OAuthGrant": "app/oauth/repository.py",
    "OAuthIssuer": "app/oauth/repository.py",
}
COLUMN_OWNERS = {
    ("Project", "app/retention/repository.py"): {"retention_days"},
    ("Project", "app/search/fulltext/repository.py"): {
        "term_stats_at",
        "term_stats_notes",
        "term_stats_avgdl",
    },
}
# Tables written in SQL text (no mapped class): the daily usage counters.
TEXT_OWNERS = {
    "usage_daily": "app/usage/repository.py",
    # Model spend, per use of a model: usage counts it for every domain.
    "session_spend": "app/usage/repository.py",
    "memory_spend": "app/usage/repository.py",
    **{
        table: "app/sessions/repository.py"
        for table in (
            "agent_sessions",
            "session_inbox",
            "session_patterns",
            "session_resume",
            "session_collections",
        )
    },
    **{table: "app/memories/repository.py" for table in ("memory_threads", "memory_inbox")},
}
_WRITE_CALLS = {"insert", "pg_insert", "update", "delete"}
_SQL_WRITE = re.compile(r"\b(?:INSERT INTO|UPDATE|DELETE FROM)\s+([a-z_]+)")


def _mapped_tables() -> dict[str, str]:
    from app.models import Base

    return {m.class_.__name__: m.class_.__tablename__ for m in Base.registry.mappers}


def _writes(path: Path) -> list[tuple[int, str, set[str]]]:
    """(line, class, columns set by .values()) of every write in the file:
    SQLAlchemy statements on a mapped class, session.add of one, and SQL
    text naming a table."""
    classes = _mapped_tables()
    by_table = {table: name for name, table in classes.items()}
    out: list[tuple[int, str, set[str]]] = []
    for fn in ast.walk(ast.parse(path.read_text())):
        if not isinstance(fn, ast.AsyncFunctionDef | ast.FunctionDef):
            continue
        columns = {
            k.arg
            for c in ast.walk(fn)
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
            if c.func.attr == "values"
            for k in c.keywords
            if k.arg
        }
        for node in ast.walk(fn):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else getattr(f, "attr", "")
                arg = node.args[0] if node.args else None
                if name in _WRITE_CALLS and isinstance(arg, ast.Name) and arg.id in classes:
                    out.append((node.lineno, arg.id, columns))
                if name == "add" and isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name):
                    if arg.func.id in classes:
                        out.append((node.lineno, arg.func.id, set()))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                for table in _SQL_WRITE.findall(node.value):
                    out.append((node.lineno, by_table.get(table, table), {"<sql>"}))
    return out


def test_every_mapped_class_has_one_owner() -> None:
    assert set(OWNERS) == set(_mapped_tables())


def test_every_write_sits_in_its_owners_repository() -> None:
    offenders = []
    for path in _sources():
        rel = str(path.relative_to(ROOT))
        for line, name, columns in _writes(path):
            owner = OWNERS.get(name) or TEXT_OWNERS.get(name)
            if owner == rel:
                continue
            allowed = COLUMN_OWNERS.get((name, rel))
            if allowed is not None and columns and columns <= allowed:
                continue
            offenders.append(f"{rel}:{line} writes {name} {sorted(columns)}")
    assert offenders == []


def test_the_write_scan_sees_writes() -> None:
    """The scan above finds what it must (a check that could not fail is no check)."""
    found = {name for _, name, _ in _writes(APP / "notes" / "repository" / "notes.py")}
    assert found == {"Note"}
    retention = _writes(APP / "retention" / "repository.py")
    assert [(n, c) for _, n, c in retention] == [("Project", {"retention_days"})]
    assert {n for _, n, _ in _writes(APP / "usage" / "repository.py")} >= {"usage_daily"}


# -- a repository's writers are called from its own package ---------------------------

# The job outbox's enqueue (every domain queues work in its own transaction)
# and the audit log's record (every domain records what it did).
SHARED_WRITERS = {
    ("app.jobs.repository", "enqueue"),
    ("app.jobs.repository", "enqueue_new"),
    ("app.audit.repository", "record"),
}
_WRITE_NAMES = _WRITE_CALLS | {"add"}


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _writers(path: Path) -> set[str]:
    """Functions of a repository module that write (a write statement, SQL
    text that writes, or a call to such a function of the same module):
    found from the code, so a new writer is covered the day it is added."""
    calls: dict[str, set[str]] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef):
            names: set[str] = set()
            for sub in ast.walk(node):
                if isinstance(sub, ast.Call):
                    f = sub.func
                    names.add(f.id if isinstance(f, ast.Name) else getattr(f, "attr", ""))
                elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                    if _SQL_WRITE.search(sub.value) or "keepmem_prune" in sub.value:
                        names.add("insert")
            calls[node.name] = names
    found = {f for f, names in calls.items() if names & _WRITE_NAMES}
    while grown := {f for f, names in calls.items() if names & found} - found:
        found |= grown
    return {f for f in found if not f.startswith("_")}


def _repositories() -> dict[str, set[str]]:
    """Every repository module (``repository.py``, or a module of a
    ``repository/`` package) with its write functions; a package is listed
    too, with the writers it re-exports."""
    out: dict[str, set[str]] = {}
    packages: dict[str, Path] = {}
    for path in _sources():
        if path.name == "repository.py" or path.parent.name == "repository":
            if path.name == "__init__.py":
                packages[_module(path)] = path
            else:
                out[_module(path)] = _writers(path)
    for name, init in packages.items():
        exported: set[str] = set()
        for module, names in _imports(init):
            exported |= names & out.get(module, set())
        out[name] = exported
    return out


def _domain(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _calls_to_writers(path: Path, repos: dict[str, set[str]]) -> list[tuple[int, str, str]]:
    tree = ast.parse(path.read_text())
    aliases: dict[str, str] = {}  # local name -> repository module
    direct: dict[str, tuple[str, str]] = {}  # local name -> (module, writer)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                local = a.asname or a.name
                if f"{node.module}.{a.name}" in repos:
                    aliases[local] = f"{node.module}.{a.name}"
                elif a.name in repos.get(node.module, set()):
                    direct[local] = (node.module, a.name)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name in repos and a.asname:
                    aliases[a.asname] = a.name
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
                module = aliases.get(f.value.id)
                if module is not None and f.attr in repos[module]:
                    out.append((node.lineno, module, f.attr))
            elif isinstance(f, ast.Name) and f.id in direct:
                out.append((node.lineno, *direct[f.id]))
    return out


def test_repository_writers_are_called_only_from_their_own_package() -> None:
    repos = _repositories()
    offenders = []
    for path in _sources():
        here = _domain(_module(path))
        for line, module, fn in _calls_to_writers(path, repos):
            if _domain(module) != here and (module, fn) not in SHARED_WRITERS:
                offenders.append(f"{path.relative_to(ROOT)}:{line} {module}.{fn}")
    assert offenders == []


def test_the_writer_scan_sees_writers() -> None:
    repos = _repositories()
    assert {"insert_note", "update_note", "delete_note", "set_expiry"} <= repos[
        "app.notes.repository.notes"
    ]
    assert {"insert_note", "insert_parts", "archive_current"} <= repos["app.notes.repository"]
    assert {"upsert", "delete_for_note"} <= repos["app.notes.repository.vectors"]
    assert {"record"} <= repos["app.notes.repository.changes"]
    assert {"replace_from", "add_edges", "delete_from"} == repos["app.notes.repository.edges"]
    assert {"enqueue", "claim_many", "fail"} <= repos["app.jobs.repository"]
    assert "get" not in repos["app.notes.repository"]
    # a call from another package is seen, by module alias and by name
    calls = _calls_to_writers(APP / "jobs" / "outbox.py", repos)
    assert ("app.jobs.repository", "claim_many") in {(m, f) for _, m, f in calls}


def test_notes_writing_imports_no_other_repository_but_the_job_outbox() -> None:
    repos = set(_repositories())
    imported = set()
    for module, names in _imports(APP / "notes" / "writing.py"):
        imported |= {m for m in (module, *(f"{module}.{n}" for n in names)) if m in repos}
    assert imported - {"app.jobs.repository"} <= {m for m in repos if m.startswith("app.notes.")}
    assert "app.notes.repository" in imported


# -- no import loop, and packages import down the layers ------------------------------


def _module_edges() -> dict[str, set[str]]:
    """File-level imports inside app (lazy ones included): ``from p import
    m`` of a module m is an import of p.m, not of p's __init__."""
    files = {_module(p): p for p in _sources()}
    edges: dict[str, set[str]] = {m: set() for m in files}
    for module, path in files.items():
        for target, names in _imports(path):
            subs = {f"{target}.{n}" for n in names} & files.keys()
            hits = subs or ({target} & files.keys())
            if names and len(subs) < len(names) and target in files:
                hits.add(target)  # names that are not modules come from the package
            edges[module] |= hits - {module}
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_between_files() -> None:
    assert _cycles(_module_edges()) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# The layers, lowest first: a package imports only from layers below its
# own. base: settings, errors, logging, metrics, the providers' adapters;
# kit: shared vocabulary; infra: the engine, the ORM rows, tenancy, the
# input door; then the domains in the order they build on each other; web:
# the HTTP edge (deps, routers, middleware, MCP, the dashboard); cli last.
BASE = {"settings", "errors", "request_vars", "logs", "metrics", "tracing", "sealing", "providers"}
INFRA = {"db", "models", "tenancy", "caches", "ratelimit", "wire", "replicas"}
WEB = {"deps", "main", "middleware", "mcp_endpoint", "cors", "docs", "ui", "admin"}
LAYERS = [
    "base", "kit", "infra",
    "audit",  # the audit log every domain records into
    "tenants",  # the registry: tenants, projects, their quotas and settings
    "jobs",  # the job outbox every domain queues work into; the jobs API
    "usage", "auth",
    "notes",  # the note aggregate: every note, version, part, vector, edge, change
    "ingest", "graph",
    "grounding",  # long notes as passages, citations of their spans that verify
    "search", "retention", "events", "flows",
    "sessions",  # coding-agent sessions: hook events in, checkpoints and patterns out
    "memories",  # memory formation: messages in, memories out, reconciled by slot and time
    "distill",  # memories distilled from cited passages, with their provenance
    "mem0compat",  # mem0's hosted API on keepmem's memories (under /mem0)
    "project_settings",  # a project's settings as one document: every domain's, audited
    "accounts",  # making tenants and projects: keys, seeded notes, usage
    "oauth", "erasure", "keepstore", "health",
    "pipeline",  # the worker's machinery: runs every domain's background work
    "web", "cli",
]  # fmt: skip
# Imports against the layers, each with its reason (at most 10).
AGAINST_THE_LAYERS = {
    ("auth", "oauth"): "a bearer credential is an API key or an OAuth access token: "
    "resolving one checks the token with oauth's keyring (oauth's consent makes keys "
    "and projects through auth and accounts, so oauth sits above both)",
}


def _unit(module: str, path: Path) -> str:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "base"
    if path.name == "router.py" or top in WEB:
        return "web"
    if top in BASE:
        return "base"
    if top in INFRA:
        return "infra"
    return top


def _pairs() -> dict[tuple[str, str], list[str]]:
    files = {_module(p): p for p in _sources()}
    pairs: dict[tuple[str, str], list[str]] = {}
    for module, targets in _module_edges().items():
        for target in targets:
            a, b = _unit(module, files[module]), _unit(target, files[target])
            if a != b:
                pairs.setdefault((a, b), []).append(f"{module} -> {target}")
    return pairs


def test_every_package_has_a_layer() -> None:
    files = {_module(p): p for p in _sources()}
    assert {_unit(m, p) for m, p in files.items()} == set(LAYERS)


def test_packages_import_down_the_layers() -> None:
    rank = {name: i for i, name in enumerate(LAYERS)}
    against = {pair: how for pair, how in _pairs().items() if rank[pair[1]] >= rank[pair[0]]}
    assert len(AGAINST_THE_LAYERS) <= 10
    assert {pair: how for pair, how in against.items() if pair not in AGAINST_THE_LAYERS} == {}
    # an exception no import needs any more is dropped from the list
    assert set(AGAINST_THE_LAYERS) <= set(against)


def test_the_kit_imports_no_domain() -> None:
    offenders = []
    for path in (APP / "kit").rglob("*.py"):
        for module, _ in _imports(path):
            if not module.startswith("app."):
                continue
            top = module.split(".")[1]
            if top != "kit" and top not in {"errors", "settings", "providers"}:
                offenders.append(f"{path.relative_to(ROOT)} imports {module}")
            if top == "providers" and module != "app.providers.errors":
                offenders.append(f"{path.relative_to(ROOT)} imports {module}")
    assert offenders == []


def test_no_file_over_600_lines_and_no_note_table_module_over_300() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in _sources()
        if (n := len(p.read_text().splitlines())) > 600
    }
    assert long == {}
    tables = {
        p.name: n
        for p in (APP / "notes" / "repository").glob("*.py")
        if (n := len(p.read_text().splitlines())) > 300
    }
    assert tables == {}


def test_notes_use_cases_do_not_import_fastapi_or_commit() -> None:
    for path in (APP / "notes").glob("*.py"):
        if path.name in ("router.py", "schemas.py"):
            continue
        for module, _ in _imports(path):
            assert not module.startswith(("fastapi", "starlette", "arq")), path
        assert ".commit(" not in path.read_text(), path


# -- tenancy in one module -----------------------------------------------------------

MINTERS = {"mint", "mint_tenant", "scope_for_project", "tenant_for_admin", "tenant_for_jobs",
           "scope_for_job", "Scope", "TenantScope"}  # fmt: skip
# Where scopes may be made: auth (app/auth, and the API's auth dependency in
# deps.py), tenant administration creating a tenant's projects, and the
# worker's job loader (runner claims and runs jobs; the dispatcher queues a
# tenant's maintenance jobs).
MINT_ALLOWED = {
    "app/tenancy.py",
    "app/auth/service.py",
    "app/oauth/tokens.py",
    "app/deps.py",
    "app/tenants/service.py",
    "app/accounts/service.py",
    "app/erasure/service.py",
    "app/pipeline/runner.py",
    "app/pipeline/dispatcher.py",
}


def test_scopes_are_minted_only_by_auth_and_the_job_loader() -> None:
    offenders = []
    for path in _sources():
        rel = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                fn = node.func
                name = (
                    fn.id
                    if isinstance(fn, ast.Name)
                    else fn.attr
                    if isinstance(fn, ast.Attribute)
                    else ""
                )
                if name in MINTERS and rel not in MINT_ALLOWED:
                    offenders.append(f"{rel}:{node.lineno} {name}")
    assert offenders == []


def test_the_tenant_is_bound_in_one_module() -> None:
    """Only tenancy.py sets keepmem's own settings (planner settings, such as
    find's, may be set elsewhere: they decide plans, never what is visible)."""
    offenders = [
        str(p.relative_to(ROOT))
        for p in _sources()
        if p != APP / "tenancy.py"
        and re.search(r"keepmem\.(tenant_id|system)|set_config\(\s*['\"]keepmem", p.read_text())
    ]
    assert offenders == []


def test_repositories_take_scopes_not_tenant_ids() -> None:
    """A tenant's data is reached through a Scope (or TenantScope), never a
    bare tenant id. The key lookup runs before any tenant is known and takes
    the key's hash; the tenants registry itself is system data."""
    allowed = {("app/tenants/repository.py", "get_tenant")}
    offenders = []
    for path in _sources("repository.py"):
        rel = str(path.relative_to(ROOT))
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef):
                args = node.args.args + node.args.kwonlyargs
                if any(a.arg == "tenant_id" for a in args) and (rel, node.name) not in allowed:
                    offenders.append(f"{rel}:{node.name}")
    assert offenders == []
