"""A covering index of chunk summaries: a chart read's extent from the index alone (issue 21:
the compare page when its data is not in memory).

Revision ID: 0022
Revises: 0021

A chart read asks each series' extent first (metric_chunks.extent: its first and last steps
and a count of points up to a bound), which reads the `count`, `first_step` and `last_step` of
the key's chunks. Those are in each chunk's row, and a key's rows are wherever their uploads
put them (by rowid on SQLite, in the heap on PostgreSQL), among the other keys' and runs': the
compare page's read of 20 runs x 8 keys read 5,400 pages cold, 39 MB, ~25 of them a series for
its 25 chunk rows. With the columns in an index on (key_id, chunk, ...), a key's entries are
side by side: 1,700 pages, 22 MB, and the read 560-660 → 350-440 ms (docs/benchmarks.md, "The
compare page from disk").

Built from the table's rows here (0.6 s for 11,250 chunks on SQLite: only the rows' first
bytes, not their packed columns).
"""

from __future__ import annotations

from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

_COLUMNS = ["key_id", "chunk", "count", "first_step", "last_step"]


def upgrade() -> None:
    op.create_index("ix_metric_chunks_extent", "metric_chunks", _COLUMNS)


def downgrade() -> None:
    op.drop_index("ix_metric_chunks_extent", "metric_chunks")
