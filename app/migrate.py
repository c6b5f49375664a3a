"""Run Alembic migrations programmatically (the only way the schema changes)."""

from __future__ import annotations

from pathlib import Path

from alembic.config import Config

from alembic import command

ROOT = Path(__file__).resolve().parent.parent


def alembic_config(owner_url: str, app_role: str) -> Config:
    ini = ROOT / "alembic.ini"
    if not ini.exists():
        raise RuntimeError(f"alembic.ini not found at {ini}: run from a source checkout")
    config = Config(str(ini))
    config.attributes["url"] = owner_url
    config.attributes["app_role"] = app_role
    return config


def upgrade(owner_url: str, app_role: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(owner_url, app_role), revision)


def downgrade(owner_url: str, app_role: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(owner_url, app_role), revision)
