"""Receipts keep the SHA-256 of their body; segments count the records not indexed (issue 12).

Revision ID: 0009
Revises: 0008

- receipts.digest: the hex SHA-256 of the upload's body (decompressed NDJSON, or the SDK's
  batch as sent). An Idempotency-Key reused with another body is refused (422) instead of
  being answered with the first receipt while the second body is dropped. Receipts written
  before have none and answer any body, as they did.
- segments.ignored: records of the segment that were not indexed because their id was in the
  run's stream already (the first upload of an id is the one kept); exports read such a
  segment through its index rows instead of streaming its blob.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("receipts", sa.Column("digest", sa.String(64), nullable=True))
    op.add_column("segments", sa.Column("ignored", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("segments") as batch:
        batch.drop_column("ignored")
    with op.batch_alter_table("receipts") as batch:
        batch.drop_column("digest")
