"""
The step browser's reads on a large async-RL run, on the embedded store (SQLite):

- a run of 200,000 episodes over 1,000 steps (200 per step), and one annotation per episode
  saying the step it was trained at (a quarter of them one step later: off-policy);
- timed: `/steps` over the whole run and for the last 10 steps (what the live page polls), in
  both meanings (dispatched at, trained at), and one page of a step's episodes sorted by reward;
- next to the same `/steps` query without the off-policy count (what it cost before).

Episodes and annotations go in through the store's own write paths (the episode index of a
segment, annotations with their receipts), so the trained step is set as in production.

    uv run python benchmarks/steps_read.py            # ~1 minute
    uv run python benchmarks/steps_read.py --quick    # 20,000 episodes

Results go in docs/benchmarks.md, section "Server".
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import func, select

from openruns.server.store import Store
from openruns.server.store import episodes as episode_sql
from openruns.server.store.runs import create_run
from openruns.server.store.schema import episodes

STEPS = 1000
BATCH = 10_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20,000 episodes instead of 200,000")
    args = parser.parse_args()
    count = 20_000 if args.quick else 200_000
    with tempfile.TemporaryDirectory() as data:
        store = Store.open(f"sqlite:///{os.path.join(data, 'openruns.db')}")
        try:
            report(store, count)
        finally:
            store.close()


def report(store: Store, count: int) -> None:
    run, _ = store.db.write_sync(create_run, "bench", {"id": "steps", "kind": "train"}, None, 0.0)
    seq = run["seq"]
    rng = random.Random(0)
    started = time.perf_counter()
    for first in range(0, count, BATCH):
        ids = range(first, min(first + BATCH, count))
        rows = [_index_row(i, i * STEPS // count, rng.random()) for i in ids]
        store.db.write_sync(episode_sql.add_segment, seq, "episodes", "blob", 1, rows, 0.0)
    loaded = time.perf_counter() - started
    started = time.perf_counter()
    for first in range(0, count, BATCH):
        rows = [
            _annotation(i, i * STEPS // count + (1 if i % 4 == 0 else 0))
            for i in range(first, min(first + BATCH, count))
        ]
        store.db.write_sync(_ingest_annotations(seq, rows))
    annotated = time.perf_counter() - started
    print(f"{count:,} episodes indexed in {loaded:.1f} s, annotated in {annotated:.1f} s")
    print(f"load average {os.getloadavg()[0]:.2f}")
    last = STEPS - 10

    def steps(by: str, step_min: int | None = None) -> Callable[[Any], Any]:
        return lambda conn: episode_sql.steps(conn, seq, "episodes", step_min, by=by)

    def page(by: str) -> Callable[[Any], Any]:
        return lambda conn: episode_sql.list_episodes(
            conn, seq, stream="episodes", step=STEPS // 2, sort="-reward", limit=100,
            after=None, by=by,
        )  # fmt: skip

    def before(step_min: int | None) -> Callable[[Any], Any]:
        e = episodes
        query = (
            select(e.c.step, func.count(), func.avg(e.c.reward))
            .where(e.c.run_seq == seq, e.c.stream == "episodes")
            .group_by(e.c.step)
        )
        if step_min is not None:
            query = query.where(e.c.step >= step_min)
        return lambda conn: conn.execute(query).all()

    for name, read in (
        ("/steps, whole run, dispatched at", steps("dispatched")),
        ("/steps, whole run, trained at", steps("trained")),
        ("/steps, whole run, without off_policy (before)", before(None)),
        ("/steps, last 10 steps, dispatched at", steps("dispatched", last)),
        ("/steps, last 10 steps, trained at", steps("trained", last)),
        ("/steps, last 10 steps, without off_policy (before)", before(last)),
        ("/episodes, one step by reward, dispatched at", page("dispatched")),
        ("/episodes, one step by reward, trained at", page("trained")),
    ):
        times = []
        for _ in range(20):
            started = time.perf_counter()
            store.db.read_sync(read)
            times.append(time.perf_counter() - started)
        print(f"{name}: {statistics.median(times) * 1000:.1f} ms median")


def _index_row(i: int, step: int, reward: float) -> dict[str, Any]:
    return {
        "episode_id": f"ep-{i}",
        "step": step,
        "reward": reward,
        "env": "math",
        "ok": True,
        "tokens": 1000,
        "duration": 1.0,
        "kind": "train",
        "subset": "all",
        "frame_offset": 0,
        "frame_length": 1,
        "offset": 0,
        "length": 1,
    }


def _annotation(i: int, trained: int) -> dict[str, Any]:
    return {
        "episode_id": f"ep-{i}",
        "trace_id": None,
        "producer": "trainer",
        "step": trained,
        "ts": 0.0,
        "body": '{"info": {"advantage": 0.5}}',
    }


def _ingest_annotations(seq: int, rows: list[dict[str, Any]]) -> Callable[[Any], Any]:
    from openruns.server.store.annotations import add, trained_steps

    def write(conn: Any) -> None:
        add(conn, seq, rows)
        episode_sql.mark_trained(conn, seq, trained_steps(rows))

    return write


if __name__ == "__main__":
    main()
