"""Alerts (issue 22): rules, their per-run state, deliveries, and what changed per run.

Revision ID: 0014
Revises: 0013

- alert_rules: a rule per team or project: its condition (JSON), its webhook (URL, body format,
  signing secret), enabled.
- alert_states: per (rule, run, subject) whether the condition holds and how many times it
  started to: the dedupe key of a delivery.
- alert_deliveries: each webhook call to make, claimed by one replica at a time, with its
  attempts and outcome (the delivery log).
- alert_activity: per run when its data last arrived and whether it changed since the
  evaluator last looked, so evaluation reads only what changed.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "alert_rules",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("team_id", sa.String(128), nullable=False),
        sa.Column("project", sa.String(256)),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("condition", sa.Text, nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("format", sa.String(16), nullable=False),
        sa.Column("secret", sa.String(64), nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_alert_rules_team", "alert_rules", ["team_id", "project"])
    op.create_table(
        "alert_states",
        sa.Column("rule_id", sa.Integer, primary_key=True),
        sa.Column("run_seq", sa.Integer, primary_key=True),
        sa.Column("subject", sa.String(256), primary_key=True),
        sa.Column("firing", sa.Boolean, nullable=False),
        sa.Column("episode", sa.Integer, nullable=False),
        sa.Column("changed_at", sa.Float, nullable=False),
    )
    op.create_table(
        "alert_deliveries",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("rule_id", sa.Integer, nullable=False),
        sa.Column("team_id", sa.String(128), nullable=False),
        sa.Column("run_seq", sa.Integer),
        sa.Column("dedupe", sa.String(600), nullable=False),
        sa.Column("event", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("next_at", sa.Float, nullable=False),
        sa.Column("claimed_until", sa.Float),
        sa.Column("response_status", sa.Integer),
        sa.Column("last_error", sa.Text),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("delivered_at", sa.Float),
        sa.UniqueConstraint("rule_id", "dedupe", name="uq_alert_deliveries_rule_dedupe"),
    )
    op.create_index("ix_alert_deliveries_due", "alert_deliveries", ["status", "next_at"])
    op.create_index("ix_alert_deliveries_team", "alert_deliveries", ["team_id", "id"])
    op.create_table(
        "alert_activity",
        sa.Column("run_seq", sa.Integer, primary_key=True),
        sa.Column("last_data_at", sa.Float),
        sa.Column("pending", sa.Boolean, nullable=False),
    )
    op.create_index("ix_alert_activity_pending", "alert_activity", ["pending"])


def downgrade() -> None:
    op.drop_table("alert_activity")
    op.drop_table("alert_deliveries")
    op.drop_table("alert_states")
    op.drop_table("alert_rules")
