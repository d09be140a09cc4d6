"""A chart read's extent (metric_chunks.extent: the first and last steps of a series' range and
a count of its points up to a bound) reads the key's chunk summaries from the covering index
ix_metric_chunks_extent, not from each chunk's row: a key's rows lie wherever their uploads put
them, and read cold the compare page's 160 series read 5,400 pages for them (migration 0022).

SQLite only: its planner takes a covering index whenever one serves. PostgreSQL's choice of an
index-only scan rests on its statistics and the table's visibility map, which a new table in a
test does not have."""

from __future__ import annotations

from openruns.server.store import Store
from openruns.server.store.metric_chunks import _EXTENT, _where
from openruns.server.store.sql import _read_sql

COVERED = "USING COVERING INDEX ix_metric_chunks_extent"


def test_a_series_extent_reads_the_chunk_summaries_from_their_index(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path / 'openruns.db'}")
    try:
        with store.db.writer.begin() as conn:
            sql, order, defaults = _read_sql(_EXTENT, conn.dialect)
            values = {**defaults, **_where(1, 100, 18_000), "up_to": 10**6}
            assert order is not None
            args = tuple(values[name] for name in order)
            plan = [row[-1] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, args)]
    finally:
        store.close()
    on_chunks = [line for line in plan if "metric_chunks" in line]
    assert len(on_chunks) == 3, plan  # the inner chunks' first step, last step and counts
    assert all(COVERED in line for line in on_chunks), plan
