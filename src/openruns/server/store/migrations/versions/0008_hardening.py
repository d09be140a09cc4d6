"""Hardening (issue 12): run ids per team; dashboard sessions.

Revision ID: 0008
Revises: 0007

- runs: `id` is unique within a team, no longer across teams: (team_id, id) is the unique key,
  and a plain index on id serves lookups of a run token (which names only the id). So a team
  choosing an id another team uses creates its own run, and learns nothing about the other.
- sessions: a dashboard sign-in. The cookie holds a random token; only its SHA-256 is stored,
  with the API key it was opened with (a revoked key ends its sessions), the key's team, and
  when it expires. Sign-out deletes the row, so a session ends on every replica at once.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        # SQLite cannot drop a constraint: batch mode copies the table. 0001 declared the
        # unique id unnamed; the naming convention gives it the name dropped here.
        with op.batch_alter_table(
            "runs",
            recreate="always",
            naming_convention={"uq": "uq_%(table_name)s_%(column_0_name)s"},
        ) as batch:
            batch.drop_constraint("uq_runs_id", type_="unique")
            batch.create_unique_constraint("uq_runs_team_id", ["team_id", "id"])
    else:
        for constraint in sa.inspect(bind).get_unique_constraints("runs"):
            if constraint["column_names"] == ["id"]:
                name = constraint["name"]
                assert name is not None  # PostgreSQL names every constraint
                op.drop_constraint(name, "runs", type_="unique")
        op.create_unique_constraint("uq_runs_team_id", "runs", ["team_id", "id"])
    op.create_index("ix_runs_id", "runs", ["id"])
    op.create_table(
        "sessions",
        sa.Column("token_hash", sa.String(64), primary_key=True),
        sa.Column("key_id", sa.Integer, nullable=False),
        sa.Column("team_id", sa.String(128), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
    )
    op.create_index("ix_sessions_expires", "sessions", ["expires_at"])


def downgrade() -> None:
    op.drop_table("sessions")
    op.drop_index("ix_runs_id", "runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_constraint("uq_runs_team_id", type_="unique")
        batch.create_unique_constraint("uq_runs_id", ["id"])
