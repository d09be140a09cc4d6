"""Console output of runs (issue 14): log lines and their per-run totals.

Revision ID: 0007
Revises: 0006

- log_lines: one row per line a run's processes printed (stdout, stderr, a traceback, a
  launched component's output), keyed by (run, offset): the offset is the line's place in the
  run's whole output in bytes, assigned in arrival order, so pages and live reads are keyset
  ranges and a gap in the offsets is where lines were dropped.
- log_totals: per run, what was received (lines, bytes) and what was dropped from the middle
  to keep the run's output within the server's bound (the head and the tail are kept).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "log_lines",
        sa.Column("run_seq", sa.Integer, primary_key=True),
        sa.Column("offset", sa.BigInteger, primary_key=True),
        sa.Column("size", sa.Integer, nullable=False),
        sa.Column("ts", sa.Float, nullable=False),
        sa.Column("stream", sa.String(32), nullable=False),
        sa.Column("source", sa.String(128), nullable=False),
        sa.Column("line", sa.Text, nullable=False),
        sqlite_with_rowid=False,
    )
    op.create_index("ix_log_lines_run_stream", "log_lines", ["run_seq", "stream", "offset"])
    op.create_table(
        "log_totals",
        sa.Column("run_seq", sa.Integer, primary_key=True),
        sa.Column("lines", sa.BigInteger, nullable=False),
        sa.Column("bytes", sa.BigInteger, nullable=False),
        sa.Column("dropped_lines", sa.BigInteger, nullable=False),
        sa.Column("dropped_bytes", sa.BigInteger, nullable=False),
        sa.Column("gap_offset", sa.BigInteger),  # where the dropped middle begins
    )


def downgrade() -> None:
    op.drop_table("log_totals")
    op.drop_index("ix_log_lines_run_stream", "log_lines")
    op.drop_table("log_lines")
