"""
A dense key's reads in-process, on a SQLite file: CPU per read (time.process_time), so the
other jobs of a shared machine count less than in wall time. Written for the chunked layout
(store/metric_chunks.py) against the row layout: run it from either tree.

- write: KEYS keys x STEPS steps, in uploads of 10,000 steps (as the fleet benchmark sends);
- timed, REPEATS times each: the chart read of one key (1000 points) over the whole range and
  over a 10 % zoom, its full-resolution read of 1,000 steps at an odd offset, one export page
  (50,000 points) and the whole key's export in pages, the alert evaluator's newest 20 points,
  the keys' stats.

    uv run python benchmarks/metric_reads.py
    PYTHONPATH=/other/tree/src uv run python /other/tree/benchmarks/metric_reads.py
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from openruns.server.store import Store, alerts, metric_key_ids, metric_reads
from openruns.server.store import metrics as metric_sql
from openruns.spec import MAX_STEP


def timed(label: str, repeats: int, fn: Callable[[], Any]) -> None:
    cpu = []
    for _ in range(repeats):
        begin = time.process_time()
        fn()
        cpu.append(time.process_time() - begin)
    cpu.sort()
    print(
        f"{label}: {statistics.median(cpu) * 1000:.2f} ms CPU median, "
        f"{cpu[int(0.9 * (len(cpu) - 1))] * 1000:.2f} ms p90 ({repeats} reads)",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--keys", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    print(f"openruns from {metric_sql.__file__}; load {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(f"sqlite:///{tmp}/openruns.db")
        names = [f"train/metric_{k}" for k in range(args.keys)]
        begin = time.process_time()
        for first in range(0, args.steps, 10_000):
            points = {
                (n, s): (math.sin(s / 100 + k), 1.7e9 + s / 10)
                for k, n in enumerate(names)
                for s in range(first, min(first + 10_000, args.steps))
            }
            store.db.write_sync(metric_sql.write_points, 1, points)
        cpu = time.process_time() - begin
        print(f"write: {cpu / (args.steps * args.keys) * 1e6:.2f} CPU-us per value", flush=True)
        key = names[0]
        key_id = store.db.read_sync(metric_key_ids.key_ids, 1, [key], False)[key]
        steps = args.steps
        zoom = (steps // 2, steps // 2 + steps // 10 - 1)
        read = store.db.read_sync
        timed("chart, whole range", args.repeats,
              lambda: read(metric_reads.series, 1, [key], 0, MAX_STEP, 1000))  # fmt: skip
        timed("chart, 10 % zoom", args.repeats,
              lambda: read(metric_reads.series, 1, [key], *zoom, 1000))  # fmt: skip
        timed("full resolution, 1,000 steps", args.repeats,
              lambda: read(metric_reads.series, 1, [key], steps // 3 + 7, steps // 3 + 1006,
                           0))  # fmt: skip
        timed("export page of 50,000", args.repeats,
              lambda: read(metric_reads.points_page, key_id, steps // 4, 50_000))  # fmt: skip

        def export() -> None:
            after = -1
            while page := read(metric_reads.points_page, key_id, after, 50_000):
                after = page[-1][0]

        timed("export of the key", max(3, args.repeats // 10), export)
        timed("newest 20 points", args.repeats,
              lambda: read(alerts.recent_points, 1, [key], 20))  # fmt: skip
        timed("key stats", args.repeats, lambda: read(metric_reads.step_key_stats, 1))
        store.close()
    print(f"load at the end {os.getloadavg()}")


if __name__ == "__main__":
    main()
