"""Layering rules: SQL only in repositories; app never imports worker."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app"
SQL_NAMES = {"select", "insert", "update", "delete", "text", "func", "literal_column"}
# Infrastructure allowed to speak SQL besides repositories: the engine
# (db.py), the RLS settings (tenancy.py) and the ORM row definitions (models.py).
SQL_ALLOWED = {"db.py", "tenancy.py", "models.py", "repository.py", "migrate.py"}


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
    for path in APP.rglob("*.py"):
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
        for p in APP.rglob("*.py")
        for module, _ in _imports(p)
        if module == "worker" or module.startswith("worker.")
    ]
    assert offenders == []


def test_services_do_not_import_fastapi_or_arq_or_commit() -> None:
    for path in APP.rglob("service.py"):
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
