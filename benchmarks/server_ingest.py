"""
Server throughput on the embedded store (SQLite + local blobs), against a real
`openruns server` process on loopback:

1. metrics ingest: NDJSON rows in batched requests (zstd, 4 in flight), rows/s and points/s;
2. episode ingest: 32 MiB batches of ~50 KB episodes (zstd, 2 in flight), MB/s of NDJSON,
   next to the raw disk write speed (same bytes, 32 MiB files, fsync + rename) in the same
   data directory;
3. the latency of a downsampled read (1000 points) of a 1,000,000-step series.

    uv run python benchmarks/server_ingest.py            # a few minutes
    uv run python benchmarks/server_ingest.py --quick    # a smoke run

Results go in docs/benchmarks.md, section "Server".
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import orjson
import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parent))
import server_process  # noqa: E402
from openruns.rundir import batch_key  # noqa: E402

SRC = server_process.SRC
MiB = 1024 * 1024


def start_server(data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    return server_process.start_server(["--data-dir", str(data_dir)], data_dir.with_suffix(".log"))


def post_all(
    url: str, run_id: str, kind: str, bodies: list[tuple[bytes, str]], workers: int
) -> float:
    """POST every (compressed body, key); seconds taken."""

    def post(item: tuple[bytes, str]) -> None:
        body, key = item
        headers = {"Content-Encoding": "zstd", "Idempotency-Key": key}
        response = client.post(f"/runs/{run_id}/{kind}", content=body, headers=headers)
        response.raise_for_status()

    limits = httpx.Limits(max_connections=workers)
    with httpx.Client(base_url=url + "/api/v1", timeout=300, limits=limits) as client:
        start = time.perf_counter()
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(post, bodies))
        return time.perf_counter() - start


def new_run(url: str) -> str:
    return httpx.post(url + "/api/v1/runs", json={"kind": "train"}, timeout=30).json()["id"]


def metric_batches(
    steps: int, keys: int, rows_per_batch: int, start: int = 0
) -> list[tuple[bytes, str]]:
    rng = random.Random(0)
    names = [f"train/metric_{k}" for k in range(keys)]
    out = []
    for first in range(start, start + steps, rows_per_batch):
        raw = b"".join(
            orjson.dumps({"step": s, "ts": 1.7e9 + s, "values": {n: rng.random() for n in names}})
            + b"\n"
            for s in range(first, min(first + rows_per_batch, start + steps))
        )
        out.append((zstandard.ZstdCompressor(level=1).compress(raw), batch_key(raw)))
    return out


def bench_metrics(url: str, steps: int, keys: int) -> dict[str, float]:
    rows_per_batch = max(1, 50_000 // keys)
    batches = metric_batches(steps, keys, rows_per_batch)
    seconds = post_all(url, new_run(url), "metrics", batches, workers=4)
    return {"rows_s": steps / seconds, "points_s": steps * keys / seconds, "seconds": seconds}


def make_episode(rng: random.Random, i: int, step: int) -> dict:
    words = ["the", "model", "answer", "tool", "call", "result", "reasoning", "step", "value"]
    turns = [
        {"role": "user" if t % 2 else "assistant", "content": " ".join(rng.choices(words, k=600))}
        for t in range(12)
    ]
    return {
        "id": f"e{i}",
        "run": {"work": {"step": step}},
        "env": "math",
        "traces": [{"reward": rng.random(), "num_total_tokens": 4000, "messages": turns}],
    }


def episode_batches(total_mb: int) -> tuple[list[tuple[bytes, str]], int]:
    rng = random.Random(1)
    batches, raw_total, i = [], 0, 0
    template = [make_episode(rng, k, 0) for k in range(50)]
    while raw_total < total_mb * MiB:
        lines = []
        size = 0
        while size < 32 * MiB:
            record = dict(template[i % len(template)], id=f"e{i}", run={"work": {"step": i // 64}})
            line = orjson.dumps(record) + b"\n"
            lines.append(line)
            size += len(line)
            i += 1
        raw = b"".join(lines)
        raw_total += len(raw)
        batches.append((zstandard.ZstdCompressor(level=1).compress(raw), batch_key(raw)))
    return batches, raw_total


def raw_disk_mb_s(directory: Path, total_bytes: int) -> float:
    """Write total_bytes as 32 MiB files: write, fsync, rename, fsync the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    chunk = os.urandom(32 * MiB)
    start = time.perf_counter()
    written = n = 0
    while written < total_bytes:
        tmp, final = directory / f".{n}.tmp", directory / f"{n}.bin"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        view = memoryview(chunk)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        os.close(fd)
        os.replace(tmp, final)
        dfd = os.open(directory, os.O_RDONLY)
        os.fsync(dfd)
        os.close(dfd)
        written += len(chunk)
        n += 1
    seconds = time.perf_counter() - start
    for path in directory.iterdir():
        path.unlink()
    return written / MiB / seconds


def bench_episodes(url: str, data_dir: Path, total_mb: int) -> dict[str, float]:
    batches, raw_total = episode_batches(total_mb)
    compressed = sum(len(b) for b, _ in batches)
    seconds = post_all(url, new_run(url), "episodes", batches, workers=2)
    disk = raw_disk_mb_s(data_dir / "raw-disk-test", raw_total)
    return {
        "mb_s": raw_total / MiB / seconds,
        "raw_mb": raw_total / MiB,
        "ratio": raw_total / compressed,
        "disk_mb_s": disk,
    }


def bench_read(url: str, steps: int, repeats: int) -> dict[str, float]:
    run_id = new_run(url)
    post_all(url, run_id, "metrics", metric_batches(steps, 1, 50_000), workers=4)
    timings: dict[str, list[float]] = {"full range": [], "zoom 10%": []}
    with httpx.Client(base_url=url + "/api/v1", timeout=60) as client:
        for _ in range(repeats):
            for name, params in (
                ("full range", {}),
                ("zoom 10%", {"step_min": steps // 2, "step_max": steps // 2 + steps // 10}),
            ):
                start = time.perf_counter()
                response = client.get(
                    f"/runs/{run_id}/metrics",
                    params={"keys": "train/metric_0", "max_points": 1000, **params},
                )
                timings[name].append(time.perf_counter() - start)
                body = response.json()
                assert body["downsampled"] and len(body["series"]["train/metric_0"]["step"]) <= 1000
    out = {}
    for name, values in timings.items():
        values.sort()
        out[f"{name} median ms"] = statistics.median(values) * 1000
        out[f"{name} p95 ms"] = values[int(0.95 * (len(values) - 1))] * 1000
    return out


def machine() -> str:
    model = "unknown CPU"
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return (
        f"{os.cpu_count()} cores ({model}), Python {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}, {platform.system()} {platform.release()}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    args = parser.parse_args()
    metric_steps = 50_000 if args.quick else 500_000
    episode_mb = 64 if args.quick else 512
    read_steps = 100_000 if args.quick else 1_000_000

    print(f"machine: {machine()}")
    print(
        "load average (1, 5, 15 min) at the start: "
        + ", ".join(f"{x:.2f}" for x in os.getloadavg())
    )
    with tempfile.TemporaryDirectory(prefix="openruns-bench-") as tmp:
        data_dir = Path(tmp) / "data"
        proc, url = start_server(data_dir)
        try:
            for keys in (1, 10):
                result = bench_metrics(url, metric_steps, keys)
                print(
                    f"metrics ingest, {keys} value(s) per row: {result['rows_s']:,.0f} rows/s, "
                    f"{result['points_s']:,.0f} points/s ({metric_steps:,} rows in "
                    f"{result['seconds']:.1f} s)"
                )
            result = bench_episodes(url, data_dir, episode_mb)
            print(
                f"episode ingest: {result['mb_s']:.0f} MB/s of NDJSON "
                f"({result['raw_mb']:.0f} MiB, zstd ratio {result['ratio']:.1f}); raw disk "
                f"write (32 MiB files, fsync + rename): {result['disk_mb_s']:.0f} MB/s"
            )
            result = bench_read(url, read_steps, repeats=10 if args.quick else 30)
            print(
                f"downsampled read of a {read_steps:,}-step series to 1000 points: "
                + ", ".join(f"{k} {v:.0f}" for k, v in result.items())
            )
        finally:
            proc.terminate()
            proc.wait(30)
    # Other work on the machine shows in the figures: the load average says how much there was.
    print(
        "load average (1, 5, 15 min) at the end: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())
    )


if __name__ == "__main__":
    main()
