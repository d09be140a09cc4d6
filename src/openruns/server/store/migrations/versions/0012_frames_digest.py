"""The digest of each indexed record's frames, checked by every read (issue 25).

Revision ID: 0012
Revises: 0011

- episodes.frames_digest: BLAKE2b-128 of the segment's bytes that hold the record (its index
  row's frame_offset and frame_length), computed at ingest from the bytes written. A read
  compares it with the bytes it got before decompressing them, so a flipped byte, a truncated
  or a swapped blob answers 410 instead of other text (server/segment_reads.py). Rows indexed
  before this revision keep null: their reads verify the zstd frames' own checksums.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("episodes", sa.Column("frames_digest", sa.LargeBinary(16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("episodes") as batch:
        batch.drop_column("frames_digest")
