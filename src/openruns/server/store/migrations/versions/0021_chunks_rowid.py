"""metric_chunks becomes a table with a rowid on SQLite (issue 21: the compare page's reads).

Revision ID: 0021
Revises: 0020

A WITHOUT ROWID table keeps its rows in the b-tree of its primary key, and SQLite, looking a
key up in such a tree, compares it with a cell by reading the cell's whole record when the
record overflows its page (btree.c, sqlite3BtreeIndexMoveto; SQLite's own advice is WITHOUT
ROWID for rows under ~1/20 of a page). A chunk's row is its packed columns, up to ~64 KB: every
probe of (key_id, chunk) read several whole chunks, overflow pages and all, to find one. The
extent of a chart read (a few probes of a key's chunks) cost 0.57 ms a key in the server,
92 of the ~216 ms that the compare page's read of 20 runs x 8 keys took in the store (0.37 ms
in plain sqlite3); in a table with a rowid, (key_id, chunk) is its own small index
(sqlite_autoindex_metric_chunks_1) and the same probes cost 0.05 ms a key (docs/benchmarks.md,
"Chunks with a rowid, reads on the driver's cursor").

On SQLite the table is rebuilt: its rows are copied once into the new table (2.9 s for 11,250
chunks, 1 GB, on this 2-core machine; the old pages go to the file's free list, reused by
later writes, or given back by VACUUM). PostgreSQL has no such option: nothing to do.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def _rebuild(with_rowid: bool) -> None:
    """The table again, as it is (its columns read from the database), with or without a
    rowid, and its rows copied over."""
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        return
    old = sa.Table("metric_chunks", sa.MetaData(), autoload_with=bind)
    new = old.to_metadata(sa.MetaData(), name="metric_chunks_rebuilt")
    new.dialect_options["sqlite"]["with_rowid"] = with_rowid
    new.create(bind)
    names = ", ".join(column.name for column in old.columns)
    op.execute(f"INSERT INTO metric_chunks_rebuilt ({names}) SELECT {names} FROM metric_chunks")
    op.drop_table("metric_chunks")
    op.rename_table("metric_chunks_rebuilt", "metric_chunks")


def upgrade() -> None:
    _rebuild(with_rowid=True)


def downgrade() -> None:
    _rebuild(with_rowid=False)
