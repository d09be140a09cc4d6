"""Who set a run's status, and the cohorts an episode was marked into later (issue 20).

Revision ID: 0011
Revises: 0010

- runs.status_by: who set the run's current status: "owner" (a finish, a resume, a heartbeat
  of a run the sweeper had crashed) or "sweeper" (crashed for silence: a guess). A run the
  sweeper crashed still takes its owner's late uploads and final status. Runs closed before
  have none.
- runs.status_history: every change of status after creation, as a JSON list of
  {"status", "by", "at"}, so a run reads "crashed by the sweeper, then completed by its owner".
- episode_subsets: a stored episode's later cohort markings (prime-rl logs an episode as `all`
  on arrival and again as `effective` when it is trained on): the record is kept once, its
  later subsets are memberships, and a read by subset finds it under each.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("status_by", sa.String(16), nullable=True))
    op.add_column("runs", sa.Column("status_history", sa.Text, nullable=False, server_default="[]"))
    op.create_table(
        "episode_subsets",
        sa.Column("run_seq", sa.Integer, primary_key=True),
        sa.Column("stream", sa.String(16), primary_key=True),
        sa.Column("episode_id", sa.String(256), primary_key=True),
        sa.Column("subset", sa.String(32), primary_key=True),
    )


def downgrade() -> None:
    op.drop_table("episode_subsets")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("status_history")
        batch.drop_column("status_by")
