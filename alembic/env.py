"""Alembic environment: async engine on the owner URL.

The URL and the application role come from the Alembic config's attributes
(set by ``keepmem migrate``) or, failing that, from Settings (the checkout's
``alembic -c alembic.ini upgrade head`` with KEEPMEM_DATABASE_URL or
KEEPMEM_OWNER_DATABASE_URL set).
"""

from __future__ import annotations

import asyncio
from logging.config import fileConfig

from alembic import context
from sqlalchemy import pool
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import async_engine_from_config

from app.models import Base
from app.settings import get_settings

config = context.config
target_metadata = Base.metadata

# alembic.ini's logging (the alembic command); keepmem migrate has no file.
if config.config_file_name is not None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _url() -> str:
    url = config.attributes.get("url") or get_settings().effective_owner_url
    if not url:
        raise RuntimeError(
            "no database URL: set KEEPMEM_OWNER_DATABASE_URL or KEEPMEM_DATABASE_URL"
        )
    return str(url)


def _do_run(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=target_metadata)
    with context.begin_transaction():
        context.run_migrations(
            app_role=config.attributes.get("app_role") or get_settings().app_role
        )


async def _run_async() -> None:
    engine = async_engine_from_config(
        {"sqlalchemy.url": _url()}, prefix="sqlalchemy.", poolclass=pool.NullPool
    )
    async with engine.connect() as connection:
        await connection.run_sync(_do_run)
    await engine.dispose()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _do_run(connection)
    else:
        asyncio.run(_run_async())


if context.is_offline_mode():
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations(app_role=get_settings().app_role)
else:
    run_migrations_online()
