"""The ids an episodes upload brings, and a rollouts page filtered by id, are looked up by id,
not by reading the run's episodes; a run-wide sorted page walks an index in its order.

Ids, SQLite only: without ANALYZE statistics its planner chose an index on (run_seq, stream, ...)
for `run_seq = ? AND stream = ? AND episode_id IN (...)` and read the whole run's stream for
every chunk of ids, so ingest slowed as a run grew (3,200 -> 1,300 episodes/s over its first
1.75M, docs/benchmarks.md "Ten million episodes"). PostgreSQL plans from its statistics."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from sqlalchemy import event, insert

from openruns.server.store import Store
from openruns.server.store.episodes import SORTS, _held_subsets, list_episodes, steps
from openruns.server.store.rewards import step_rewards
from openruns.server.store.schema import episodes

BY_ID = "ix_episodes_run_id (run_seq=? AND episode_id=?)"


def plans_of(tmp_path, call: Callable) -> list[str]:
    """The SQLite query plans of the statements on `episodes` that `call(conn)` runs on a new
    store."""
    store = Store.open(f"sqlite:///{tmp_path / 'openruns.db'}")
    try:
        return explained(store, call, "EXPLAIN QUERY PLAN ")
    finally:
        store.close()


def explained(store: Store, call: Callable, explain: str, *settings: str) -> list[str]:
    """The plans (`explain` + statement, after `settings`) of the statements on `episodes` that
    `call(conn)` runs, one line each."""
    engine = store.db.writer
    seen: list[tuple[str, tuple]] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        if "FROM episodes" in statement:
            seen.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", record)
    with engine.begin() as conn:
        call(conn)
    event.remove(engine, "before_cursor_execute", record)
    with engine.begin() as conn:
        for setting in settings:
            conn.exec_driver_sql(setting)
        return [
            " ".join(str(row[-1]) for row in conn.exec_driver_sql(explain + s, p)) for s, p in seen
        ]


def postgres_plans(stores_factory, tmp_path, call: Callable) -> list[str]:
    """As plans_of, on a new PostgreSQL store, with sorts and sequential scans priced out: it
    plans an empty table from no statistics, so a plan that still sorts has no index in its
    order, or a condition (the cursor's) that keeps it from walking one."""
    store = stores_factory.new("postgres", tmp_path).open_store()
    try:
        off = ("SET LOCAL enable_sort = off", "SET LOCAL enable_seqscan = off")
        return explained(store, call, "EXPLAIN ", *off)
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


def listings(conn) -> None:
    """Every run-wide sorted listing, its first page and a page after a cursor inside the
    rows with a value and inside the NULLs (the store is empty: plans, not rows)."""
    for sort in SORTS:
        for after in (None, (5, 10), (None, 10)):
            page = list_episodes(
                conn, 1, stream="episodes", step=None, sort=sort, limit=50, after=after
            )
            assert page == ([], None)


def test_run_wide_pages_walk_an_index_in_their_order(tmp_path):
    """A run-wide page sorted by step or reward read the run's rows into a temporary B-tree
    and sorted them, for every page: 1.8 s to a 30 s timeout at 10M episodes (issue 21)."""
    plans = plans_of(tmp_path, listings)
    assert len(plans) == 3 * (2 + 3 + 1)  # per sort: values, NULLs; ties, beyond, NULLs; NULLs
    for plan in plans:
        assert "TEMP B-TREE" not in plan, plan
        assert "ix_episodes_run_step" in plan or "ix_episodes_run_reward" in plan, plan
    # After a cursor, the rest of its ties (or NULLs) is a seek to its seq, not a walk over
    # every tie: with `(col, seq) > (?, ?)` SQLite sought on col alone (seq is its rowid).
    assert sum(("AND seq>?" in p or "AND seq<?" in p) for p in plans) == 3 * 2


def test_a_steps_page_is_found_by_the_steps_index(tmp_path):
    """A step's page (the dashboard's rollouts view) reads that step's rows by the step's
    index and sorts them; SQLite had walked the run's reward index in order instead."""

    def pages(conn):
        for sort, by, after in itertools.product(
            SORTS, ("dispatched", "trained"), (None, (5, 10), (None, 10))
        ):
            page = list_episodes(
                conn, 1, stream="episodes", step=7, by=by, sort=sort, limit=50, after=after
            )
            assert page == ([], None)

    plans = plans_of(tmp_path, pages)
    assert len(plans) == 3 * 2 * 3
    for plan in plans:
        assert "(run_seq=? AND stream=? AND step=?)" in plan or (
            "(run_seq=? AND stream=? AND trained_step=?" in plan
        ), plan


def test_a_steps_rewards_are_read_by_the_steps_index(tmp_path):
    """The reward distribution of a step (the dashboard's histogram) asks for the step's
    rewards in order: SQLite walked the run's reward index for it instead of the step's rows."""

    def rewards(conn):
        for by, kind in itertools.product(("dispatched", "trained"), (None, "eval")):
            got = step_rewards(conn, 1, "episodes", 7, by=by, kind=kind)
            assert got == {"values": [], "missing": 0, "truncated": False}

    plans = plans_of(tmp_path, rewards)
    assert len(plans) == 2 * 2 * 2  # the values, and the count of those without a reward
    for plan in plans:
        assert "ix_episodes_run_reward" not in plan, plan
        assert "step=?" in plan, plan


def test_run_wide_pages_walk_an_index_on_postgres_too(stores_factory, tmp_path):
    plans = postgres_plans(stores_factory, tmp_path, listings)
    assert len(plans) == 3 * (2 + 3 + 1)
    for plan in plans:
        assert "Sort" not in plan, plan
        assert "ix_episodes_run_step" in plan or "ix_episodes_run_reward" in plan, plan


def step_tables(conn):
    """The per-step table's pages, both orders and meanings, after a step or not."""
    for by, descending, after in itertools.product(
        ("dispatched", "trained"), (False, True), (None, 7)
    ):
        page = steps(conn, 1, "episodes", by=by, after=after, limit=500, descending=descending)
        assert page == []


def test_a_page_of_the_steps_table_walks_the_steps_index(tmp_path):
    """The run page read the whole run's per-step table: 100,002 rows aggregated from 10M
    episodes at every load, 2.1-2.2 s (issue 21). A page groups in the index's order, so it
    stops after its steps."""
    plans = plans_of(tmp_path, step_tables)
    assert len(plans) == 8 + 4  # each page; and the stepless row (of a page with room, unbounded)
    for plan in plans:
        assert "TEMP B-TREE" not in plan, plan
        assert "ix_episodes_run_step" in plan or "ix_episodes_run_trained" in plan, plan


def test_a_page_of_the_steps_table_walks_the_steps_index_on_postgres_too(stores_factory, tmp_path):
    plans = postgres_plans(stores_factory, tmp_path, step_tables)
    assert len(plans) == 8 + 4
    for plan in plans:
        assert "Sort" not in plan and "HashAggregate" not in plan, plan
        assert "ix_episodes_run_step" in plan or "ix_episodes_run_trained" in plan, plan


def scanned_listings(conn):
    """Filtered run-wide pages over 12 rows, two index entries a window and one window a page
    (monkeypatched): windows end inside ties, among the NULLs and past a cursor."""
    rows = [
        {
            "run_seq": 1, "stream": "episodes", "episode_id": f"e{i}",
            "step": i % 3 if i % 5 else None, "reward": i % 2 if i % 4 else None,
            "env": "math", "ok": True, "kind": "train", "segment_id": 1,
            "frame_offset": 0, "frame_length": 1, "offset": 0, "length": 1,
        }
        for i in range(12)
    ]  # fmt: skip
    conn.execute(insert(episodes), rows)
    for sort, after in itertools.product(SORTS, (None, (1, 5), (None, 5))):
        page, _ = list_episodes(
            conn, 1, stream="episodes", step=None, sort=sort, limit=50, after=after, env="code"
        )
        assert page == []


def test_a_filtered_run_wide_page_walks_its_window_by_the_index(tmp_path, monkeypatch):
    """A rare filter on a run-wide sort walked the index to the end of the run for a page
    (2.8 s at 10M episodes); now a window of it at a time: the window's end read from the
    index alone, then the rows within it by the same index, in its order."""
    monkeypatch.setattr("openruns.server.store.episodes.SCAN_ROWS", 2)
    monkeypatch.setattr("openruns.server.store.episodes.SCAN_SECONDS", 0.0)
    plans = plans_of(tmp_path, scanned_listings)
    assert len(plans) >= 2 * 3 * 3
    for plan in plans:
        assert "TEMP B-TREE" not in plan, plan
        assert "ix_episodes_run_step" in plan or "ix_episodes_run_reward" in plan, plan
