"""Run notes and groups; the full-text index of rollouts (issue 14).

- runs.notes: free text a reader writes on the run page; runs.group_name: the run's group
  (`init(group=...)`), which the runs table groups by.
- episode_search: one row per episode index row (same seq), built behind ingest by the search
  indexer (server/search_indexer.py). On SQLite an FTS5 table without stored content (the text
  lives in the segments already; snippets are cut from the record on read): column `scope`
  holds the tokens `r<run seq>`, `s<stream>` and `k<kind>`, so a query narrows to one run
  inside the full-text index; `body` holds the record's text. On PostgreSQL a table with a
  tsvector and a GIN index.
- The indexer's progress (the last episode seq indexed) is the `search_seq` row of server_meta.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("notes", sa.Text))
        batch.add_column(sa.Column("group_name", sa.String(256)))
    op.create_index("ix_runs_team_group", "runs", ["team_id", "group_name"])
    if op.get_bind().dialect.name == "sqlite":
        op.execute(
            "CREATE VIRTUAL TABLE episode_search USING fts5("
            "scope, body, content='', tokenize='unicode61 remove_diacritics 2')"
        )
    else:
        op.execute(
            "CREATE TABLE episode_search ("
            "seq BIGINT PRIMARY KEY, run_seq INTEGER NOT NULL, stream VARCHAR(16) NOT NULL, "
            "kind VARCHAR(64), doc TSVECTOR NOT NULL)"
        )
        op.execute("CREATE INDEX ix_episode_search_doc ON episode_search USING GIN (doc)")
        op.execute("CREATE INDEX ix_episode_search_run ON episode_search (run_seq, seq)")


def downgrade() -> None:
    op.execute("DROP TABLE episode_search")
    op.execute("DELETE FROM server_meta WHERE name = 'search_seq'")
    op.drop_index("ix_runs_team_group", "runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("group_name")
        batch.drop_column("notes")
