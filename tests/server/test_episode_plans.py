"""The ids an episodes upload brings, and a rollouts page filtered by id, are looked up by id,
not by reading the run's episodes.

SQLite only: without ANALYZE statistics its planner chose an index on (run_seq, stream, ...)
for `run_seq = ? AND stream = ? AND episode_id IN (...)` and read the whole run's stream for
every chunk of ids, so ingest slowed as a run grew (3,200 -> 1,300 episodes/s over its first
1.75M, docs/benchmarks.md "Ten million episodes"). PostgreSQL plans from its statistics."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import event

from openruns.server.store import Store
from openruns.server.store.episodes import _held_subsets, list_episodes

BY_ID = "ix_episodes_run_id (run_seq=? AND episode_id=?)"


def plans_of(tmp_path, call: Callable) -> list[str]:
    """The query plans of the statements on `episodes` that `call(conn)` runs on a new store."""
    store = Store.open(f"sqlite:///{tmp_path / 'openruns.db'}")
    try:
        engine = store.db.writer
        seen: list[tuple[str, tuple]] = []

        def record(conn, cursor, statement, parameters, context, executemany):
            if "FROM episodes" in statement:
                seen.append((statement, parameters))

        event.listen(engine, "before_cursor_execute", record)
        with engine.begin() as conn:
            call(conn)
        event.remove(engine, "before_cursor_execute", record)
        with engine.connect() as conn:
            return [
                " ".join(row[-1] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + s, p))
                for s, p in seen
            ]
    finally:
        store.close()


def test_held_ids_are_probed_by_id(tmp_path):
    def held(conn):
        assert _held_subsets(conn, 1, "episodes", [f"e{i}" for i in range(600)]) == {}

    plans = plans_of(tmp_path, held)
    assert len(plans) == 2  # 600 ids: two chunks
    for plan in plans:
        assert BY_ID in plan, plan


def test_a_rollouts_page_filtered_by_id_is_probed_by_id(tmp_path):
    """The rollouts list filtered by an episode id (a link to one rollout) made the same choice:
    218-507 ms at 1.76M episodes, for one row."""

    def pages(conn):
        for step in (None, 3):
            page = list_episodes(
                conn, 1, stream="episodes", step=step, sort="-reward", limit=50, after=None,
                episode_id="e7",
            )  # fmt: skip
            assert page == ([], None)

    plans = plans_of(tmp_path, pages)
    assert len(plans) == 2
    for plan in plans:
        assert BY_ID in plan, plan
