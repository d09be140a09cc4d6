"""
A retention pass over a large run (issue 22), on the embedded store (SQLite + a blob folder):

- the run: 100,000 episodes over 100 steps (one segment of 1,000 per step, ~1 KiB of text each,
  framed by the server's own `build_segment`), ended; another run beside it with 1,000
  episodes;
- a real server on the data directory; a reader of the other run (a page of its episodes, then
  one of its records, in turn) timed for 5 s before the pass and all through it;
- timed: one pass (`retention.reduce.run_pass`, as `openruns server retention` runs it, in the
  server's process) keeping 8 episodes per step; the run's blob bytes before and after.

    uv run python benchmarks/retention.py                # 100,000 episodes
    uv run python benchmarks/retention.py --scale 0.1    # a tenth of that

Results go in docs/benchmarks.md, section "Retention".
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx
import orjson

from openruns.server import serve_in_thread
from openruns.server.retention.reduce import run_pass
from openruns.server.retention_policy import RetentionRule
from openruns.server.segments import build_segment
from openruns.server.store import Store, open_blobs
from openruns.server.store import episodes as episode_sql
from openruns.server.store.runs import create_run, finish_run

STEPS = 100
KEEP = 8
WORDS = [f"w{i}" for i in range(5000)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="of 100,000 episodes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data:
        root = Path(data)
        count = int(100_000 * args.scale)
        started = time.perf_counter()
        seed(root, count)
        print(f"seeded {count:,} episodes in {time.perf_counter() - started:.0f} s")
        measure(root)


def seed(root: Path, count: int) -> None:
    store = Store.open(f"sqlite:///{root / 'openruns.db'}")
    blobs = open_blobs(str(root / "blobs"))
    rng = random.Random(22)
    try:
        # The other run is in a project no rule names (the sweeper may crash it meanwhile).
        for run_id, n_episodes in (("big", count), ("other", 1000)):
            fields = {"id": run_id, "kind": "train", "project": run_id}
            run, _ = store.db.write_sync(create_run, "default", fields, None, time.time())
            seq = run["seq"]
            per = max(1, n_episodes // STEPS)
            for step in range(STEPS):
                lines = [
                    orjson.dumps(
                        {
                            "id": f"ep-{step}-{i}",
                            "run": {"work": {"step": step}},
                            "env": "math",
                            "traces": [{"reward": rng.random()}],
                            "prompt": " ".join(rng.choices(WORDS, k=150)),
                        }
                    )
                    for i in range(per)
                ]
                segment = build_segment(b"\n".join(lines) + b"\n", "train")
                key = f"runs/{seq}/episodes/seg-{step}.ndjson.zst"
                blobs.put_atomic(key, segment.blob)
                store.db.write_sync(
                    episode_sql.add_segment,
                    seq,
                    "episodes",
                    key,
                    len(segment.blob),
                    segment.rows,
                    time.time(),
                )
            if run_id == "big":
                store.db.write_sync(finish_run, seq, "completed", None, {}, time.time())
    finally:
        store.close()


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def measure(root: Path) -> None:
    server = serve_in_thread(root)
    store = Store.open(f"sqlite:///{root / 'openruns.db'}")
    blobs = open_blobs(str(root / "blobs"))
    try:
        latencies: dict[str, list[float]] = {"before": [], "during": []}
        phase = ["before"]
        stop = threading.Event()
        errors: list[int] = []

        def read() -> None:
            with httpx.Client(base_url=server.url + "/api/v1", timeout=600) as reader:
                i = 0
                while not stop.is_set():
                    i += 1
                    for path in ("/episodes?limit=50", f"/episodes/ep-{i % STEPS}-{i % 10}"):
                        started = time.perf_counter()
                        status = reader.get(f"/runs/other{path}").status_code
                        latencies[phase[0]].append(time.perf_counter() - started)
                        if status != 200:
                            errors.append(status)

        big = root / "blobs" / "runs" / "1"
        before = folder_bytes(big)
        thread = threading.Thread(target=read)
        thread.start()
        time.sleep(5)
        phase[0] = "during"
        load = os.getloadavg()
        started = time.perf_counter()
        rules = [RetentionRule(1.0, KEEP, project="big")]
        reports = asyncio.run(run_pass(store, blobs, rules, as_of=time.time() + 2 * 86400))
        took = time.perf_counter() - started
        stop.set()
        thread.join()
        (report,) = reports
        after = folder_bytes(big)
        print(
            f"retention pass: {took:.1f} s; episodes {report['episodes']:,} -> "
            f"{report['episodes_kept']:,} (dropped {report['episodes_dropped']:,}); segments "
            f"rewritten {report['segments_rewritten']}, deleted {report['segments_deleted']}"
        )
        print(f"blob bytes of the run: {before:,} -> {after:,} ({after / before:.2%})")
        print(f"load average at the start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
        end = os.getloadavg()
        print(f"load average at the end: {end[0]:.2f} {end[1]:.2f} {end[2]:.2f}")
        for name, times in latencies.items():
            print(f"reads of another run {name} the pass: {_summary(times)}")
        print(f"reads that were not 200: {len(errors)}")
    finally:
        store.close()
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


if __name__ == "__main__":
    main()
