"""
SDK core benchmark: the cost of log_* on the caller, and offline write throughput.

    uv run python benchmarks/sdk_offline.py [--calls 10000] [--episodes 1000] [--episode-mb 1.0]

Prints, and appends nothing anywhere: copy the figures into docs/benchmarks.md with the command.
1. log_metrics with 20 scalars, N calls: per-call p50 / p99 / max and the total including
   finish(), next to a plain buffered JSONL append of the same rows (orjson + write): the floor.
   Twice: with the system metrics sampler off, then on (the default; its thread imports psutil
   after init(), and the collector's first pass over those objects lands in some log_* call).
2. log_episodes with 1,000 episodes of ~1 MB: per-call max (it must not depend on size).
3. Offline write throughput in MB/s of episode JSON, next to the single-core orjson + zstd-1
   limit measured on the same episode in this run.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import string
import tempfile
import time
from pathlib import Path

import orjson
import zstandard

import openruns


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench_metrics(base: Path, calls: int, system_metrics: bool) -> None:
    rows = [{f"train/metric_{k}": float(i * k) for k in range(20)} for i in range(calls)]
    # The benchmark's own input is not the SDK's: keep the collector from walking it, so its
    # size does not turn into gen-2 pauses charged to log_metrics (as in a trainer, whose data
    # the collector has long promoted).
    gc.collect()
    gc.freeze()
    run = openruns.init(
        mode="offline",
        dir=base / f"metrics-{system_metrics}",
        system_metrics_interval=None if system_metrics else 0,
    )
    times = []
    start = time.perf_counter()
    for step, values in enumerate(rows):
        t0 = time.perf_counter_ns()
        run.log_metrics(values, step=step)
        times.append(time.perf_counter_ns() - t0)
    run.finish()
    total = time.perf_counter() - start

    floor = []
    with open(base / "floor.jsonl", "wb") as fh:
        floor_start = time.perf_counter()
        for step, values in enumerate(rows):
            t0 = time.perf_counter_ns()
            fh.write(orjson.dumps({"step": step, "ts": time.time(), "values": values}) + b"\n")
            floor.append(time.perf_counter_ns() - t0)
        fh.flush()
    floor_total = time.perf_counter() - floor_start

    us = [t / 1000 for t in times]
    floor_us = [t / 1000 for t in floor]
    sampler = "the system metrics sampler on (default)" if system_metrics else "it off"
    print(f"log_metrics, 20 scalars, {calls} calls, {sampler}:")
    print(
        f"  openruns   p50 {statistics.median(us):6.2f} us  p99 {percentile(us, 0.99):6.2f} us"
        f"  max {max(us):8.1f} us  total incl. finish {total * 1000:7.1f} ms"
        f"  dropped {run.dropped_records}"
    )
    print(
        f"  JSONL      p50 {statistics.median(floor_us):6.2f} us"
        f"  p99 {percentile(floor_us, 0.99):6.2f} us  max {max(floor_us):8.1f} us"
        f"  total {floor_total * 1000:7.1f} ms (buffered append, the floor)"
    )


def make_episodes(count: int, megabytes: float) -> list[dict]:
    """Episodes of ~`megabytes` of JSON each, sharing their traces so memory stays small."""
    rng = random.Random(0)
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))) for _ in range(5000)]

    def node() -> dict:
        # Text and token ids with the entropy of real rollouts, so compression is not flattered.
        return {
            "message": {"role": "assistant", "content": " ".join(rng.choices(words, k=120))},
            "token_ids": [rng.randrange(150_000) for _ in range(160)],
            "logprobs": [round(-rng.random() * 3, 4) for _ in range(60)],
        }

    pool = [node() for _ in range(64)]
    node_bytes = sum(len(orjson.dumps(n)) + 1 for n in pool) / len(pool)
    nodes_per_trace = max(1, int(megabytes * 1e6 / 2 / node_bytes))
    traces = [
        {"id": f"t{k}", "reward": 0.5, "nodes": [pool[i % 64] for i in range(nodes_per_trace)]}
        for k in range(2)
    ]
    return [
        {"id": f"e{i}", "env": {"id": "bench"}, "ok": True, "traces": traces} for i in range(count)
    ]


def bench_episodes(base: Path, count: int, megabytes: float) -> None:
    episodes = make_episodes(count, megabytes)
    gc.collect()
    gc.freeze()
    one = orjson.dumps(episodes[0])
    total_mb = len(one) * count / 1e6

    run = openruns.init(mode="offline", dir=base / "episodes")
    times = []
    start = time.perf_counter()
    for episode in episodes:
        t0 = time.perf_counter_ns()
        run.log_episodes([episode])
        times.append(time.perf_counter_ns() - t0)
    logged = time.perf_counter() - start
    run.finish()
    elapsed = time.perf_counter() - start

    compressor = zstandard.ZstdCompressor(level=1)
    reps = max(3, int(200e6 / len(one)))
    t0 = time.perf_counter()
    for _ in range(reps):
        compressor.compress(orjson.dumps(episodes[0]))
    limit = len(one) * reps / 1e6 / (time.perf_counter() - t0)

    us = [t / 1000 for t in times]
    print(f"log_episodes, {count} episodes of {len(one) / 1e6:.2f} MB ({total_mb:.0f} MB):")
    print(
        f"  call p50 {statistics.median(us):6.2f} us  p99 {percentile(us, 0.99):6.2f} us"
        f"  max {max(us):7.1f} us; all calls returned in {logged * 1000:.0f} ms"
    )
    print(
        f"  offline write {total_mb / elapsed:6.0f} MB/s of episode JSON ({elapsed:.2f} s incl."
        f" finish); single-core orjson+zstd-1 limit {limit:6.0f} MB/s"
        f" ({100 * total_mb / elapsed / limit:.0f} % of it)"
    )
    print(f"  dropped {run.dropped_records} failed {run.failed_records}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--episode-mb", type=float, default=1.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="openruns-bench-") as tmp:
        bench_metrics(Path(tmp), args.calls, system_metrics=False)
        bench_metrics(Path(tmp), args.calls, system_metrics=True)
        bench_episodes(Path(tmp), args.episodes, args.episode_mb)


if __name__ == "__main__":
    main()
