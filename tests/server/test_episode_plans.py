"""The ids an episodes upload brings are looked up by id, not by reading the run's episodes.

SQLite only: without ANALYZE statistics its planner chose an index on (run_seq, stream, ...)
for `run_seq = ? AND stream = ? AND episode_id IN (...)` and read the whole run's stream for
every chunk of ids, so ingest slowed as a run grew (3,200 -> 1,300 episodes/s over its first
1.75M, docs/benchmarks.md "Ten million episodes"). PostgreSQL plans from its statistics."""

from __future__ import annotations

from sqlalchemy import event

from openruns.server.store import Store
from openruns.server.store.episodes import _held_subsets, list_episodes


def test_held_ids_are_probed_by_id(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path / 'openruns.db'}")
    try:
        engine = store.db.writer
        seen: list[tuple[str, tuple]] = []

        def record(conn, cursor, statement, parameters, context, executemany):
            if "FROM episodes" in statement:
                seen.append((statement, parameters))

        event.listen(engine, "before_cursor_execute", record)
        with engine.begin() as conn:
            assert _held_subsets(conn, 1, "episodes", [f"e{i}" for i in range(600)]) == {}
        event.remove(engine, "before_cursor_execute", record)
        assert len(seen) == 2  # 600 ids: two chunks
        with engine.connect() as conn:
            for statement, parameters in seen:
                plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters).all()
                details = " ".join(row[-1] for row in plan)
                assert "ix_episodes_run_id (run_seq=? AND episode_id=?)" in details, details
    finally:
        store.close()


def test_a_rollouts_page_filtered_by_id_is_probed_by_id(tmp_path):
    """The rollouts list filtered by an episode id (a link to one rollout) made the same choice:
    218-507 ms at 1.76M episodes, for one row."""
    store = Store.open(f"sqlite:///{tmp_path / 'openruns.db'}")
    try:
        engine = store.db.writer
        seen: list[tuple[str, tuple]] = []

        def record(conn, cursor, statement, parameters, context, executemany):
            if "FROM episodes" in statement:
                seen.append((statement, parameters))

        event.listen(engine, "before_cursor_execute", record)
        with engine.connect() as conn:
            for step in (None, 3):
                page = list_episodes(
                    conn, 1, stream="episodes", step=step, sort="-reward", limit=50,
                    after=None, episode_id="e7",
                )  # fmt: skip
                assert page == ([], None)
        event.remove(engine, "before_cursor_execute", record)
        assert len(seen) == 2
        with engine.connect() as conn:
            for statement, parameters in seen:
                plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters).all()
                details = " ".join(row[-1] for row in plan)
                assert "ix_episodes_run_id (run_seq=? AND episode_id=?)" in details, details
    finally:
        store.close()
