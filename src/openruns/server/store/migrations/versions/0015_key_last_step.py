"""The last step of each metric key, kept at write time (issue 21: a run of 100,000 keys).

Revision ID: 0015
Revises: 0014

- metric_keys.last_step: the highest step of the key's step-keyed points, -1 while it has none
  (a key with only time-keyed rows, or named by define_metric only). Points are upserted,
  never deleted, so it only grows; metrics.write_points raises it. Backfilled here from the
  top-level block summaries (level 5: schema.BLOCK_SIZES has five levels when this was
  written).
- ix_metric_keys_recent (run_seq, last_step DESC, name): the keys of a run logged at the
  latest steps first (`/metrics/keys?order=recent`) as an index walk, not an aggregate over
  every key.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "metric_keys",
        sa.Column("last_step", sa.BigInteger, nullable=False, server_default=sa.text("-1")),
    )
    op.execute(
        "UPDATE metric_keys SET last_step = COALESCE((SELECT MAX(b.last_step) FROM metric_blocks b"
        " WHERE b.key_id = metric_keys.id AND b.level = 5), -1)"
    )
    op.create_index(
        "ix_metric_keys_recent", "metric_keys", ["run_seq", sa.text("last_step DESC"), "name"]
    )


def downgrade() -> None:
    op.drop_index("ix_metric_keys_recent", "metric_keys")
    with op.batch_alter_table("metric_keys") as batch:
        batch.drop_column("last_step")
