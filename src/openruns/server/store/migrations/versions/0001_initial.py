"""The initial schema (issue 3): runs, teams and keys, metrics, episode index, receipts.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "server_meta",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )
    op.create_table(
        "teams",
        sa.Column("id", sa.String(128), primary_key=True),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("team_id", sa.String(128), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("revoked_at", sa.Float),
    )
    op.create_table(
        "runs",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(64), nullable=False, unique=True),
        sa.Column("team_id", sa.String(128), nullable=False),
        sa.Column("create_key", sa.String(256)),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("name", sa.Text),
        sa.Column("model", sa.Text),
        sa.Column("environments", sa.Text, nullable=False),
        sa.Column("framework", sa.Text),
        sa.Column("description", sa.Text),
        sa.Column("tags", sa.Text, nullable=False),
        sa.Column("config", sa.Text),
        sa.Column("training", sa.Text),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("summary", sa.Text, nullable=False),
        sa.Column("losses", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("finished_at", sa.Float),
        sa.Column("last_heartbeat_at", sa.Float),
        sa.UniqueConstraint("team_id", "create_key", name="uq_runs_team_create_key"),
    )
    op.create_index("ix_runs_team_seq", "runs", ["team_id", "seq"])
    op.create_index("ix_runs_status", "runs", ["status"])
    op.create_table(
        "run_tags",
        sa.Column("run_seq", sa.Integer, primary_key=True),
        sa.Column("tag", sa.String(256), primary_key=True),
    )
    op.create_index("ix_run_tags_tag", "run_tags", ["tag", "run_seq"])
    op.create_table(
        "metric_keys",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_seq", sa.Integer, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.UniqueConstraint("run_seq", "name", name="uq_metric_keys_run_name"),
    )
    op.create_table(
        "metric_points",
        sa.Column("key_id", sa.Integer, primary_key=True),
        sa.Column("step", sa.BigInteger, primary_key=True),
        sa.Column("value", sa.Float, nullable=False),
        sa.Column("ts", sa.Float),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "metric_blocks",
        sa.Column("key_id", sa.Integer, primary_key=True),
        sa.Column("level", sa.SmallInteger, primary_key=True),
        sa.Column("block", sa.BigInteger, primary_key=True),
        sa.Column("count", sa.Integer, nullable=False),
        sa.Column("min", sa.Float, nullable=False),
        sa.Column("max", sa.Float, nullable=False),
        sa.Column("last_step", sa.BigInteger, nullable=False),
        sa.Column("last_value", sa.Float, nullable=False),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "segments",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_seq", sa.Integer, nullable=False),
        sa.Column("stream", sa.String(16), nullable=False),
        sa.Column("blob_key", sa.Text, nullable=False),
        sa.Column("records", sa.Integer, nullable=False),
        sa.Column("bytes", sa.BigInteger, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_segments_run", "segments", ["run_seq", "id"])
    op.create_table(
        "episodes",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_seq", sa.Integer, nullable=False),
        sa.Column("stream", sa.String(16), nullable=False),
        sa.Column("episode_id", sa.String(256), nullable=False),
        sa.Column("step", sa.BigInteger),
        sa.Column("reward", sa.Float),
        sa.Column("env", sa.Text),
        sa.Column("ok", sa.Boolean),
        sa.Column("tokens", sa.BigInteger),
        sa.Column("duration", sa.Float),
        sa.Column("segment_id", sa.Integer, nullable=False),
        sa.Column("frame_offset", sa.BigInteger, nullable=False),
        sa.Column("frame_length", sa.Integer, nullable=False),
        sa.Column("offset", sa.Integer, nullable=False),
        sa.Column("length", sa.Integer, nullable=False),
    )
    op.create_index("ix_episodes_run_step", "episodes", ["run_seq", "stream", "step", "reward"])
    op.create_index("ix_episodes_run_id", "episodes", ["run_seq", "episode_id"])
    op.create_table(
        "receipts",
        sa.Column("run_seq", sa.Integer, primary_key=True),
        sa.Column("kind", sa.String(16), primary_key=True),
        sa.Column("key", sa.String(256), primary_key=True),
        sa.Column("response", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    for table in (
        "receipts",
        "episodes",
        "segments",
        "metric_blocks",
        "metric_points",
        "metric_keys",
        "run_tags",
        "runs",
        "api_keys",
        "teams",
        "server_meta",
    ):
        op.drop_table(table)
