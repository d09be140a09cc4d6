"""Retention (issue 22): what a run's reduction kept and dropped.

Revision ID: 0018
Revises: 0017

- run_retention: one row per run a retention pass reduced (or is reducing): the rule applied
  (JSON, and its keep_per_step apart, so a changed rule is seen), when a pass claimed it
  (`claimed_at`: a pass silent for the lease is taken up by any replica), when it finished
  (`reduced_at`, null while under way), the episodes and bytes kept, and the episodes, bytes
  and segments dropped or rewritten, added up over passes. Removed with its run.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_retention",
        sa.Column("run_seq", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("rule", sa.Text, nullable=False),
        sa.Column("keep_per_step", sa.Integer, nullable=False),
        sa.Column("claimed_at", sa.Float, nullable=False),
        sa.Column("reduced_at", sa.Float),
        sa.Column("episodes_kept", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("bytes_kept", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("episodes_dropped", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("bytes_dropped", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("segments_rewritten", sa.Integer, nullable=False, server_default="0"),
        sa.Column("segments_deleted", sa.Integer, nullable=False, server_default="0"),
    )


def downgrade() -> None:
    op.drop_table("run_retention")
