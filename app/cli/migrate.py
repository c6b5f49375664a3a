"""Run Alembic migrations programmatically (the only way the schema changes)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

# The migrations' source is the checkout's top-level alembic/ (beside
# alembic.ini); the wheel ships the same files inside the package as
# app/migrations (pyproject.toml's package-dir), so an installed keepmem
# migrates without a source checkout. An editable install or a checkout has
# no app/migrations and reads alembic/.
_APP = Path(__file__).resolve().parent.parent
_INSTALLED, _CHECKOUT = _APP / "migrations", _APP.parent / "alembic"
SCRIPTS = _INSTALLED if (_INSTALLED / "env.py").is_file() else _CHECKOUT


def alembic_config(owner_url: str, app_role: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(SCRIPTS))
    config.attributes["url"] = owner_url
    config.attributes["app_role"] = app_role
    return config


def upgrade(owner_url: str, app_role: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(owner_url, app_role), revision)


def downgrade(owner_url: str, app_role: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(owner_url, app_role), revision)


def set_app_login(owner_url: str, app_role: str, password: str) -> None:
    """Let the application role log in with a password (external Postgres).

    Run after ``upgrade``, which creates the role without login.
    """
    import asyncio

    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    from app.db import async_url

    async def run() -> None:
        engine = create_async_engine(async_url(owner_url))
        try:
            async with engine.begin() as conn:
                statement = await conn.scalar(
                    text(
                        "SELECT format('ALTER ROLE %I LOGIN NOSUPERUSER NOBYPASSRLS "
                        "PASSWORD %L', CAST(:role AS text), CAST(:pw AS text))"
                    ),
                    {"role": app_role, "pw": password},
                )
                await conn.execute(text(str(statement)))
        finally:
            await engine.dispose()

    asyncio.run(run())
