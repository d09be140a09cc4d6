"""
Deleting a large run (issue 22), on the embedded store (SQLite + a blob folder):

- the run: 10 M metric rows (10 keys x 1 M steps) and 100,000 episodes in 100 segments (one
  blob each), written through the store's own write paths; another run beside it with 10,000
  metric rows and 1,000 episodes;
- a real server on the data directory; a reader of the other run (its run row, a metric
  series, a page of episodes, one after the other) timed for 5 s before the deletion and
  all through it;
- timed: `DELETE /api/v1/runs/{id}` until it answers (every row and blob gone).

    uv run python benchmarks/delete_run.py                # 10 M rows, 100,000 episodes
    uv run python benchmarks/delete_run.py --scale 0.1    # a tenth of that

Results go in docs/benchmarks.md, section "Deleting a run".
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from openruns.server import serve_in_thread
from openruns.server.store import Store, open_blobs
from openruns.server.store import episodes as episode_sql
from openruns.server.store import metrics as metric_sql
from openruns.server.store.runs import create_run

KEYS = 10
POINTS_PER_WRITE = 500_000
SEGMENTS = 100


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="of 10 M rows, 100,000 episodes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data:
        root = Path(data)
        steps = int(1_000_000 * args.scale)
        count = int(100_000 * args.scale)
        started = time.perf_counter()
        seed(root, steps, count)
        print(
            f"seeded {KEYS * steps:,} metric rows and {count:,} episodes in "
            f"{time.perf_counter() - started:.0f} s"
        )
        measure(root)


def seed(root: Path, steps: int, count: int) -> None:
    store = Store.open(f"sqlite:///{root / 'openruns.db'}")
    blobs = open_blobs(str(root / "blobs"))
    try:
        for run_id, n_steps, n_episodes in (("big", steps, count), ("other", 1000, 1000)):
            run, _ = store.db.write_sync(
                create_run, "default", {"id": run_id, "kind": "train"}, None, time.time()
            )
            seq = run["seq"]
            for first in range(0, n_steps, POINTS_PER_WRITE // KEYS):
                last = min(n_steps, first + POINTS_PER_WRITE // KEYS)
                points = {
                    (f"k{k}", s): (float(s % 97), 1.0e9 + s)
                    for k in range(KEYS)
                    for s in range(first, last)
                }
                store.db.write_sync(metric_sql.write_points, seq, points)
            per = max(1, n_episodes // SEGMENTS)
            for first in range(0, n_episodes, per):
                key = f"runs/{seq}/episodes/seg-{first}.ndjson.zst"
                blobs.put_atomic(key, os.urandom(64 * 1024))
                rows = [_index_row(i, i // 200) for i in range(first, min(n_episodes, first + per))]
                store.db.write_sync(
                    episode_sql.add_segment, seq, "episodes", key, 64 * 1024, rows, time.time()
                )
    finally:
        store.close()


def measure(root: Path) -> None:
    server = serve_in_thread(root)
    try:
        with httpx.Client(base_url=server.url + "/api/v1", timeout=600) as http:
            latencies: dict[str, list[float]] = {"before": [], "during": []}
            phase = ["before"]
            stop = threading.Event()
            errors: list[int] = []

            def read() -> None:
                with httpx.Client(base_url=server.url + "/api/v1", timeout=600) as reader:
                    while not stop.is_set():
                        for path in ("", "/metrics?keys=k0,k1", "/episodes?limit=50"):
                            started = time.perf_counter()
                            status = reader.get(f"/runs/other{path}").status_code
                            latencies[phase[0]].append(time.perf_counter() - started)
                            if status != 200:
                                errors.append(status)

            thread = threading.Thread(target=read)
            thread.start()
            time.sleep(5)
            phase[0] = "during"
            load = os.getloadavg()
            started = time.perf_counter()
            answer = http.delete("/runs/big")
            took = time.perf_counter() - started
            stop.set()
            thread.join()
            assert answer.status_code == 200, answer.text
            removed = answer.json()["removed"]
            print(f"DELETE /runs/big: {took:.1f} s; removed {removed}")
            print(f"load average at the start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
            for name, times in latencies.items():
                print(f"reads of another run {name} the deletion: {_summary(times)}")
            print(f"reads that were not 200: {len(errors)}")
    finally:
        server.stop()


def _summary(times: list[float]) -> str:
    if not times:
        return "none"
    ordered = sorted(times)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return (
        f"{len(times)} reads, median {statistics.median(times) * 1000:.1f} ms, "
        f"p95 {p95 * 1000:.1f} ms, max {ordered[-1] * 1000:.1f} ms"
    )


def _index_row(i: int, step: int) -> dict[str, Any]:
    return {
        "episode_id": f"ep-{i}",
        "step": step,
        "reward": (i % 10) / 10,
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


if __name__ == "__main__":
    main()
