"""Episode listings walk an index in their order (issue 21: a run of 10,000,000 episodes).

Revision ID: 0020
Revises: 0019

- ix_episodes_run_step becomes (run_seq, stream, step, seq, reward, trained_step): a page by
  step reads in (step, seq) order, NULL steps (an eval's episodes, all of them) included; it
  still covers the per-step counts and mean rewards (`/steps`).
- ix_episodes_run_reward (run_seq, stream, reward, seq): pages by reward, forward for `reward`,
  backward for `-reward`.

Both are built from the table here: about a minute a 10M-episode store on SQLite.
"""

from __future__ import annotations

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_episodes_run_step", "episodes")
    op.create_index(
        "ix_episodes_run_step",
        "episodes",
        ["run_seq", "stream", "step", "seq", "reward", "trained_step"],
    )
    op.create_index("ix_episodes_run_reward", "episodes", ["run_seq", "stream", "reward", "seq"])


def downgrade() -> None:
    op.drop_index("ix_episodes_run_reward", "episodes")
    op.drop_index("ix_episodes_run_step", "episodes")
    op.create_index(
        "ix_episodes_run_step", "episodes", ["run_seq", "stream", "step", "reward", "trained_step"]
    )
