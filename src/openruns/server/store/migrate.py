"""
Bring a database to the newest schema with Alembic; the scripts live in `migrations/`. The
same scripts run on SQLite and PostgreSQL.

Replicas starting together: the upgrade runs inside one transaction holding the migration
lock (sql.lock_migrations; on SQLite the writer's BEGIN IMMEDIATE), so the second replica
waits, then finds the schema at head and does nothing. PostgreSQL runs DDL in transactions, so
a replica killed mid-migration leaves the schema as it was.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.util import CommandError
from sqlalchemy import Connection

from .sql import lock_migrations

__all__ = ["NewerSchemaError", "upgrade"]

SCRIPTS = Path(__file__).with_name("migrations")


def upgrade(conn: Connection) -> None:
    """Run every migration not yet applied, inside the caller's transaction."""
    lock_migrations(conn)
    config = Config()
    config.set_main_option("script_location", str(SCRIPTS))
    config.attributes["connection"] = conn
    try:
        command.upgrade(config, "head")
    except CommandError as exc:
        if "Can't locate revision" not in str(exc):
            raise
        raise NewerSchemaError(
            f"the database was migrated by a newer openruns ({exc}); upgrade this server"
        ) from exc


class NewerSchemaError(Exception):
    """The database's schema is newer than this server's migrations."""
