"""The parsed values of a run's config, for filters across runs (issue 22).

Revision ID: 0017
Revises: 0015

- runs.config_values: the mapping the run's config file holds (JSON, TOML, YAML parsed once,
  when the config is written; queries/config_values.py), as JSON text, or null when the config
  is plain text or does not parse. `config.<path>` in a run filter reads it. Existing runs are
  filled in here.
"""

from __future__ import annotations

import orjson
import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    from openruns.server.queries.config_values import config_values

    op.add_column("runs", sa.Column("config_values", sa.Text, nullable=True))
    runs = sa.table("runs", sa.column("seq"), sa.column("config"), sa.column("config_values"))
    conn = op.get_bind()
    rows = conn.execute(sa.select(runs.c.seq, runs.c.config).where(runs.c.config.is_not(None)))
    for seq, config in rows.all():
        try:
            values = config_values(orjson.loads(config))
            text = None if values is None else orjson.dumps(values, option=orjson.OPT_NON_STR_KEYS)
        except (ValueError, TypeError):
            continue
        if text is not None:
            conn.execute(
                sa.update(runs).where(runs.c.seq == seq).values(config_values=text.decode())
            )


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("config_values")
