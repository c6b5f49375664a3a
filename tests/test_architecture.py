"""Layering rules: SQL only in repositories; app never imports worker."""

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
# The migrations (Alembic scripts shipped in the package) are the schema's
# history: SQL by nature, and never edited once released.
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
        if path.name in SQL_ALLOWED:
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


# -- one owner for note data ---------------------------------------------------------

_WRITE_CALLS = {"insert", "pg_insert", "update", "delete"}


def _writers(path: Path, only: set[str] | None = None) -> set[str]:
    """Functions of a repository module whose statements write (INSERT,
    UPDATE, DELETE or session.add), directly or through a helper of the same
    module: found from the code, so a new writer is covered the day it is
    added."""
    calls: dict[str, set[str]] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef):
            names = set()
            for call in ast.walk(node):
                if isinstance(call, ast.Call):
                    fn = call.func
                    if isinstance(fn, ast.Name):
                        names.add(fn.id)
                    elif isinstance(fn, ast.Attribute):
                        names.add(fn.attr)
            calls[node.name] = names
    found = {f for f, names in calls.items() if names & (_WRITE_CALLS | {"add"})}
    while grown := {f for f, names in calls.items() if names & found} - found:
        found |= grown
    return {f for f in found if not f.startswith("_") and (only is None or f in only)}


# The repositories of note data (notes, versions, parts; vectors; tag edges)
# and which of their functions write it. Graph extraction's own tables
# (entities, mentions, relations) belong to app.graph.
NOTE_DATA = {
    "app.notes.repository": _writers(APP / "notes" / "repository.py"),
    "app.notes.repository.vectors": _writers(APP / "embeddings" / "repository.py"),
    "app.graph.repository": _writers(
        APP / "graph" / "repository.py", {"replace_from", "delete_from"}
    ),
}


def test_the_note_data_writers_are_known() -> None:
    assert {"insert_note", "update_note", "delete_note", "insert_parts"} <= NOTE_DATA[
        "app.notes.repository"
    ]
    assert {"upsert", "upsert_notes", "delete_for_note"} <= NOTE_DATA[
        "app.notes.repository.vectors"
    ]
    assert NOTE_DATA["app.graph.repository"] == {"replace_from", "delete_from"}


def test_only_the_notes_domain_writes_note_data() -> None:
    """Every write to notes, versions, parts, vectors and edges goes through
    app/notes/: the pipeline, graph and ingest call its functions."""
    offenders = []
    for path in _sources():
        if path.is_relative_to(APP / "notes"):
            continue
        tree = ast.parse(path.read_text())
        aliases: dict[str, str] = {}  # local name -> repository module
        direct: set[str] = set()  # writer functions imported by name
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    if full in NOTE_DATA:
                        aliases[a.asname or a.name] = full
                    if node.module in NOTE_DATA and a.name in NOTE_DATA[node.module]:
                        direct.add(a.asname or a.name)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            fn = node.func
            if (
                isinstance(fn, ast.Attribute)
                and isinstance(fn.value, ast.Name)
                and fn.value.id in aliases
                and fn.attr in NOTE_DATA[aliases[fn.value.id]]
            ) or (isinstance(fn, ast.Name) and fn.id in direct):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


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
    "app/auth/scope.py",
    "app/auth/service.py",
    "app/oauth/tokens.py",
    "app/deps.py",
    "app/tenants/service.py",
    "app/tenants/erasure.py",
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


def test_no_file_in_app_is_over_600_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in _sources()
        if (n := len(p.read_text().splitlines())) > 600
    }
    assert long == {}
