"""The Prime wire (issue 9): hub environment ids, eval sample rows and training Parquet objects.

Revision ID: 0003
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "prime_environments",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("team_id", sa.String(128), nullable=False),
        sa.Column("owner", sa.String(256), nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.UniqueConstraint("team_id", "owner", "name", name="uq_prime_environments_team_slug"),
    )
    op.create_table(
        "prime_objects",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_seq", sa.Integer, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("step", sa.BigInteger),
        sa.Column("blob_key", sa.String(512), nullable=False),
        sa.Column("bytes", sa.BigInteger, nullable=False),
        sa.Column("rows", sa.Integer, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.UniqueConstraint("run_seq", "blob_key", name="uq_prime_objects_run_blob"),
    )
    op.create_index("ix_prime_objects_run_kind", "prime_objects", ["run_seq", "kind", "step", "id"])


def downgrade() -> None:
    op.drop_table("prime_objects")
    op.drop_table("prime_environments")
