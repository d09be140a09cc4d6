"""Alembic environment: migrations run on the connection the server hands over (migrate.py)."""

from __future__ import annotations

from alembic import context

from openruns.server.store.schema import metadata

connection = context.config.attributes["connection"]
# render_as_batch: SQLite can only change a table by copying it; batch mode does that.
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
