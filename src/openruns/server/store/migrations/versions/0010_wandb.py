"""The W&B wire (issue 19): a project on every run, step metrics, stop requests, W&B state.

Revision ID: 0010
Revises: 0009

- runs.project: W&B's project, a first-class field of every run (native runs: `default`);
  listed by (team, project) newest first.
- runs.stop_requested_at: when a stop was asked for from the dashboard (or the API); the W&B
  wire answers it to the SDK (the file stream's `stopped`), which stops its script.
- metric_keys.step_metric: the metric a key is drawn against by default (`define_metric(...,
  step_metric=K)`, the W&B SDK's or the native one's); null: the step.
- wandb_runs: per W&B run what the wire needs beyond the native run: the entity, job type,
  the config as the SDK sent it (W&B's JSON form, with the SDK's own `_wandb` entry),
  wandb-metadata.json, the lines counted per file stream file (what RunResumeStatus answers),
  the last history row, and glob metric definitions applied as keys arrive.
- wandb_console: per (run, writer label) the console lines received and the line still open
  (a progress bar the SDK rewrites in place is kept in its last state).
- wandb_files: the files the SDK uploaded to a run (config.yaml, requirements.txt, media,
  a table artifact's entries), each a blob, by name.
- wandb_media: each media value of the run's history (an image, a table) at its step and key,
  with the file it names (and a table's copy in the run's table artifact, whose image cells
  name media files); a table of rollouts counts the episodes read from it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "runs", sa.Column("project", sa.String(256), nullable=False, server_default="default")
    )
    op.add_column("runs", sa.Column("stop_requested_at", sa.Float, nullable=True))
    op.create_index("ix_runs_team_project", "runs", ["team_id", "project", "seq"])
    op.add_column("metric_keys", sa.Column("step_metric", sa.Text, nullable=True))
    op.create_table(
        "wandb_runs",
        sa.Column("run_seq", sa.Integer, primary_key=True),
        sa.Column("entity", sa.String(128), nullable=False),
        sa.Column("job_type", sa.String(256)),
        sa.Column("wandb_config", sa.Text, nullable=False, server_default="{}"),
        sa.Column("metadata", sa.Text),
        sa.Column("history_lines", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("events_lines", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("history_tail", sa.Text),
        sa.Column("metric_globs", sa.Text, nullable=False, server_default="[]"),
        sa.Column("forked_from", sa.Text),
    )
    op.create_table(
        "wandb_console",
        sa.Column("run_seq", sa.Integer, primary_key=True),
        sa.Column("source", sa.String(128), primary_key=True),
        sa.Column("lines", sa.BigInteger, nullable=False),
        sa.Column("open_line", sa.Text),
    )
    op.create_table(
        "wandb_files",
        sa.Column("run_seq", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(1024), primary_key=True),
        sa.Column("blob_key", sa.String(1200), nullable=False),
        sa.Column("bytes", sa.BigInteger, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "wandb_media",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_seq", sa.Integer, nullable=False),
        sa.Column("step", sa.BigInteger),
        sa.Column("key", sa.Text, nullable=False),
        sa.Column("value", sa.Text, nullable=False),
        sa.Column("path", sa.String(512)),
        sa.Column("copy", sa.String(1200)),
        sa.Column("episodes", sa.Integer),
        sa.UniqueConstraint("run_seq", "step", "key", name="uq_wandb_media_run_step_key"),
    )
    op.create_index("ix_wandb_media_run_path", "wandb_media", ["run_seq", "path"])


def downgrade() -> None:
    op.drop_table("wandb_media")
    op.drop_table("wandb_files")
    op.drop_table("wandb_console")
    op.drop_table("wandb_runs")
    with op.batch_alter_table("metric_keys") as batch:
        batch.drop_column("step_metric")
    op.drop_index("ix_runs_team_project", "runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("stop_requested_at")
        batch.drop_column("project")
