"""Episode listings walk an index in their order (issue 21: a run of 10,000,000 episodes).

Revision ID: 0020
Revises: 0019

- ix_episodes_run_step becomes (run_seq, stream, step, seq, reward, trained_step): a page by
  step reads in (step, seq) order, NULL steps (an eval's episodes, all of them) included; it
  still covers the per-step counts and mean rewards (`/steps`).
- ix_episodes_run_reward (run_seq, stream, reward, seq): pages by reward, forward for `reward`,
  backward for `-reward`.
- ix_episodes_run_trained becomes (run_seq, stream, trained_step, seq, reward, step): episodes
  arrive untrained (NULL), and by (NULL, reward) each went in at a random place of the index,
  as the new reward index's entries do; by (NULL, seq) they are appended. An index taking
  inserts at random places cost ~21 us an episode on SQLite (1M inserts of 2,000 a
  transaction: 5.8 s with no such index, 28 s with one, 50 s with two), so the reward index
  costs what the trained one did. It still covers the per-trained-step counts.

Both are built from the table here: 24 s for 11M episodes on SQLite (this 2-core machine,
benchmarks/episode_pages.py's store made at 0019, then opened); PostgreSQL not measured.
"""

from __future__ import annotations

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


_STEP = ["run_seq", "stream", "step", "reward", "trained_step"]
_TRAINED = ["run_seq", "stream", "trained_step", "reward", "step"]


def _rebuild(name: str, columns: list[str]) -> None:
    op.drop_index(name, "episodes")
    op.create_index(name, "episodes", columns)


def upgrade() -> None:
    _rebuild("ix_episodes_run_step", [*_STEP[:3], "seq", *_STEP[3:]])
    _rebuild("ix_episodes_run_trained", [*_TRAINED[:3], "seq", *_TRAINED[3:]])
    op.create_index("ix_episodes_run_reward", "episodes", ["run_seq", "stream", "reward", "seq"])


def downgrade() -> None:
    op.drop_index("ix_episodes_run_reward", "episodes")
    _rebuild("ix_episodes_run_trained", _TRAINED)
    _rebuild("ix_episodes_run_step", _STEP)
