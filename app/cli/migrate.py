"""Run Alembic migrations programmatically (the only way the schema changes)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

# The migrations ship inside the package (app/migrations), so an installed
# keepmem migrates without a source checkout.
SCRIPTS = Path(__file__).resolve().parent.parent / "migrations"


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
