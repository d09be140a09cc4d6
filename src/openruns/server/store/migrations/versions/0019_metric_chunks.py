"""Dense metric series as chunks of packed columns (issue 21).

Revision ID: 0019
Revises: 0018

- metric_chunks: per (metric key, chunk = step // 4096) one row: count, min, max, first and
  last step, last value, and the chunk's steps, values and times as packed little-endian
  arrays (store/metric_chunks.py). WITHOUT ROWID on SQLite, bytea on PostgreSQL.

No data moves. The existing metric_points rows stay rows, and stay valid: a (key, step) lives
in exactly one place, and a chunk is only ever written by a write that first absorbs (reads,
merges and deletes) every row of its key inside its range; a range without a chunk is all
rows. So old rows sit beside new chunks without any step in both; a dense upload into an old
range moves that range's rows into its chunk then. The block summaries are unchanged in form.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "metric_chunks",
        sa.Column("key_id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("chunk", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("count", sa.Integer, nullable=False),
        sa.Column("min", sa.Float, nullable=False),
        sa.Column("max", sa.Float, nullable=False),
        sa.Column("first_step", sa.BigInteger, nullable=False),
        sa.Column("last_step", sa.BigInteger, nullable=False),
        sa.Column("last_value", sa.Float, nullable=False),
        sa.Column("steps", sa.LargeBinary, nullable=False),
        sa.Column("vals", sa.LargeBinary, nullable=False),
        sa.Column("times", sa.LargeBinary),
        sqlite_with_rowid=False,
    )


def downgrade() -> None:
    op.drop_table("metric_chunks")
