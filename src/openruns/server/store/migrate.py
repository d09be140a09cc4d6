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

from sqlalchemy import Connection, inspect, text

from .sql import lock_migrations

__all__ = ["HEAD", "NewerSchemaError", "upgrade"]

SCRIPTS = Path(__file__).with_name("migrations")
# The newest revision, read from the scripts' names: each is `NNNN_what.py` with revision
# "NNNN" (tests/unit/test_migration_names.py holds them to it). A database already at HEAD is
# not handed to Alembic, whose import and loading of the scripts cost every server start and
# every command that opens a store ~0.15 s of CPU.
HEAD = max(p.name[:4] for p in (SCRIPTS / "versions").glob("[0-9][0-9][0-9][0-9]_*.py"))


def upgrade(conn: Connection) -> None:
    """Run every migration not yet applied, inside the caller's transaction."""
    lock_migrations(conn)
    if _revision(conn) == HEAD:
        return
    from alembic import command
    from alembic.config import Config
    from alembic.util import CommandError

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


def _revision(conn: Connection) -> str | None:
    """The database's revision, as Alembic records it (None before the first migration)."""
    if not inspect(conn).has_table("alembic_version"):
        return None
    revision: str | None = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    return revision
