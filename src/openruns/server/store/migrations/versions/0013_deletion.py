"""Deleting runs (issue 22): tombstones, and ids that are never handed out twice.

Revision ID: 0013
Revises: 0012

- run_deletions: one row per deleted run, kept for good: its seq, team, id, project and name,
  when and by whom it was deleted, when its rows and blobs were all removed (`purged_at`,
  null while the purge is under way or was interrupted) and what was removed (JSON counts).
  Creating a run with a deleted id again is refused while a tombstone names it.
- On SQLite, `runs` and `episodes` become AUTOINCREMENT tables (a rebuild: SQLite cannot add
  it in place). Without it SQLite hands out max(rowid) + 1, so deleting the newest run would
  give its seq, and its episodes' seqs, to the next ones: a late write of the deleted run, its
  blob prefix `runs/<seq>/` and its dead full-text entries would then belong to a new run, and
  the search indexer, whose cursor is past those seqs, would never index the new episodes.
  PostgreSQL's sequences never hand a number out twice.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_deletions",
        sa.Column("run_seq", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("team_id", sa.String(128), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("project", sa.String(256)),
        sa.Column("name", sa.Text),
        sa.Column("deleted_at", sa.Float, nullable=False),
        sa.Column("deleted_by", sa.String(128)),
        sa.Column("claimed_at", sa.Float),
        sa.Column("purged_at", sa.Float),
        sa.Column("removed", sa.Text, nullable=False, server_default="{}"),
    )
    op.create_index("ix_run_deletions_team_id", "run_deletions", ["team_id", "run_id"])
    op.create_index("ix_run_deletions_purged", "run_deletions", ["purged_at"])
    if op.get_bind().dialect.name == "sqlite":
        for table in ("runs", "episodes"):
            with op.batch_alter_table(
                table, recreate="always", table_kwargs={"sqlite_autoincrement": True}
            ):
                pass


def downgrade() -> None:
    op.drop_index("ix_run_deletions_purged", "run_deletions")
    op.drop_index("ix_run_deletions_team_id", "run_deletions")
    op.drop_table("run_deletions")
