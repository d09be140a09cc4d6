"""The run contract (issue 10): time-keyed metric points, annotations, episode kind and subset.

Revision ID: 0005
Revises: 0003 (re-chain after 0004 when it lands)

- metric_time_points: rows logged without a step (`inference/*`, `event_loop_lag/*`), one per
  (metric key, timestamp), beside the step-keyed metric_points.
- annotations: later facts about an episode (trained at step M, advantage, trainer logprobs)
  from any producer, append-only, keyed by episode id.
- episodes.kind / episodes.subset: train or eval, and the cohort (all, effective). Another
  migration may add `kind` first; each column is added only when missing, so either order works.
- episodes.trained_step: the step the annotations say the episode was trained at, kept on the
  index row so a step read as "trained at N" is an index range like "dispatched at N".
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "metric_time_points",
        sa.Column("key_id", sa.Integer, primary_key=True),
        sa.Column("ts", sa.Float, primary_key=True),
        sa.Column("value", sa.Float, nullable=False),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "annotations",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_seq", sa.Integer, nullable=False),
        sa.Column("episode_id", sa.String(256), nullable=False),
        sa.Column("trace_id", sa.String(256)),
        sa.Column("producer", sa.String(128), nullable=False),
        sa.Column("step", sa.BigInteger),
        sa.Column("ts", sa.Float, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
    )
    op.create_index("ix_annotations_run_episode", "annotations", ["run_seq", "episode_id", "step"])
    op.create_index("ix_annotations_run_step", "annotations", ["run_seq", "step", "episode_id"])
    existing = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("episodes")}
    with op.batch_alter_table("episodes") as batch:
        if "kind" not in existing:
            batch.add_column(sa.Column("kind", sa.String(16)))
        if "subset" not in existing:
            batch.add_column(sa.Column("subset", sa.String(32)))
        batch.add_column(sa.Column("trained_step", sa.BigInteger))
    op.create_index("ix_episodes_run_kind_step", "episodes", ["run_seq", "stream", "kind", "step"])
    # A step's row (count, mean reward, off-policy count) read from the index alone.
    op.drop_index("ix_episodes_run_step", "episodes")
    op.create_index(
        "ix_episodes_run_step", "episodes", ["run_seq", "stream", "step", "reward", "trained_step"]
    )
    op.create_index(
        "ix_episodes_run_trained",
        "episodes",
        ["run_seq", "stream", "trained_step", "reward", "step"],
    )


def downgrade() -> None:
    op.drop_index("ix_episodes_run_trained", "episodes")
    op.drop_index("ix_episodes_run_step", "episodes")
    op.create_index("ix_episodes_run_step", "episodes", ["run_seq", "stream", "step", "reward"])
    op.drop_index("ix_episodes_run_kind_step", "episodes")
    with op.batch_alter_table("episodes") as batch:
        batch.drop_column("trained_step")
        batch.drop_column("subset")
        batch.drop_column("kind")
    op.drop_table("annotations")
    op.drop_table("metric_time_points")
