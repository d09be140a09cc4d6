"""Episodes keep their kind (train or eval), from the SDK's index rows or the record (issue 13).

Revision ID: 0004
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("episodes", sa.Column("kind", sa.String(16)))


def downgrade() -> None:
    with op.batch_alter_table("episodes") as batch:
        batch.drop_column("kind")
