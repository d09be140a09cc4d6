"""Bring a database to the newest schema with Alembic; the scripts live in `migrations/`."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection

__all__ = ["upgrade"]

SCRIPTS = Path(__file__).with_name("migrations")


def upgrade(conn: Connection) -> None:
    """Run every migration not yet applied, inside the caller's transaction."""
    config = Config()
    config.set_main_option("script_location", str(SCRIPTS))
    config.attributes["connection"] = conn
    command.upgrade(config, "head")
