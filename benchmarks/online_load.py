"""
The production-sized load test of online runs, against a local `openruns server` process.

    uv run python benchmarks/online_load.py --episodes 1000            # ~8.5 GB of JSON
    uv run python benchmarks/online_load.py --episodes 10000 --fixed-mb 2.2   # the scale variant
    uv run python benchmarks/online_load.py --episodes 50     # the quick one (make load-test)

The producer is an asyncio loop, like a trainer's orchestrator: it logs each episode (and a row
of metrics per 16 episodes) from the loop, timing every call, while a lag sampler task records
how late each 1 ms sleep wakes. The server runs in its own process on a temporary data
directory. The report: delivered / dropped / failed, log() max, loop lag p50/p99/max, MB/s of
JSON and episodes/s, peak RSS of the producer, and the single-core orjson + zstd-1 throughput on
the same episodes, measured in the same run, as the limit.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import orjson
import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parent))
import openruns  # noqa: E402
from episodes import EpisodeFactory  # noqa: E402


def start_server(data_dir: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "openruns.cli",
            "server",
            "--port",
            "0",
            "--data-dir",
            str(data_dir),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    while True:
        line = proc.stdout.readline()
        match = re.search(r"listening on (http://\S+)", line)
        if match:
            return proc, match.group(1)
        if not line:
            raise RuntimeError("the server did not start")


def single_core_limit(episodes: list[dict]) -> float:
    """MB/s of orjson.dumps + zstd-1 on one core, in series, over the sample."""
    compressor = zstandard.ZstdCompressor(level=1)
    total = 0
    start = time.perf_counter()
    for episode in episodes:
        data = orjson.dumps(episode)
        compressor.compress(data)
        total += len(data)
    return total / 1e6 / (time.perf_counter() - start)


async def produce(run, factory, sizes, lags) -> tuple[list[float], float]:
    stop = asyncio.Event()

    async def sampler() -> None:
        while not stop.is_set():
            t0 = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - t0 - 0.001)

    task = asyncio.create_task(sampler())
    calls: list[float] = []
    start = time.perf_counter()
    for i, size in enumerate(sizes):
        episode = factory.episode(i, size, step=i // 16)
        t0 = time.perf_counter()
        run.log_episodes([episode])
        calls.append(time.perf_counter() - t0)
        if i % 16 == 15:
            t0 = time.perf_counter()
            run.log_metrics({"train/reward": i / len(sizes), "train/step": i // 16}, step=i // 16)
            calls.append(time.perf_counter() - t0)
        await asyncio.sleep(0)  # the orchestrator does other work between episodes
    logged = time.perf_counter() - start
    await asyncio.to_thread(run.finish, timeout=1800)
    stop.set()
    await task
    return calls, logged


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--fixed-mb", type=float, default=None, help="every episode this size")
    parser.add_argument("--tmp", default=None, help="where the server's data goes")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="openruns-load-", dir=args.tmp))
    server, url = start_server(tmp / "server")
    try:
        factory = EpisodeFactory(seed=0)
        # The generator's shared traces are millions of objects that are the benchmark's, not
        # the SDK's: keep the collector from walking them (a trainer's long-lived data is
        # promoted the same way), or its gen-2 pauses would be charged to the loop.
        gc.collect()
        gc.freeze()
        if args.fixed_mb:
            sizes = [int(args.fixed_mb * 1e6)] * args.episodes
        else:
            sizes = factory.sizes(args.episodes)
        total_mb = sum(sizes) / 1e6
        sample = [factory.episode(i, sizes[i]) for i in range(min(8, len(sizes)))]
        limit = single_core_limit(sample)

        cpu_at_start = _cpu(resource.RUSAGE_SELF)  # the generator's setup and the limit excluded
        run = openruns.init(kind="train", name="load-test", base_url=url, dir=tmp / "local")
        lags: list[float] = []
        start = time.perf_counter()
        calls, logged = asyncio.run(produce(run, factory, sizes, lags))
        elapsed = time.perf_counter() - start

        delivered = 0
        cursor = None
        while True:
            params = {"limit": 500, **({"cursor": cursor} if cursor else {})}
            page = httpx.get(f"{url}/api/v1/runs/{run.id}/episodes", params=params, timeout=60)
            page.raise_for_status()
            body = page.json()
            delivered += len(body["items"])
            cursor = body.get("next_cursor")
            if not cursor:
                break
        peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"episodes: {args.episodes} ({total_mb:,.0f} MB of JSON), {os.cpu_count()} cores")
        print(
            f"delivered {delivered}/{args.episodes}  dropped {run.dropped_records}  "
            f"failed {run.failed_records}  errors {run.errors}"
        )
        print(f"log() max {max(calls) * 1000:.2f} ms  p99 {pct(calls, 0.99) * 1000:.3f} ms")
        print(
            f"loop lag p50 {pct(lags, 0.5) * 1000:.2f} ms  p99 {pct(lags, 0.99) * 1000:.2f} ms  "
            f"max {max(lags) * 1000:.2f} ms"
        )
        print(
            f"throughput {total_mb / elapsed:,.0f} MB/s of JSON, {args.episodes / elapsed:,.1f} "
            f"episodes/s ({elapsed:.1f} s; all log calls returned after {logged:.1f} s)"
        )
        print(
            f"single-core orjson + zstd-1 limit {limit:,.0f} MB/s "
            f"({100 * total_mb / elapsed / limit:.0f} % of it)"
        )
        print(f"producer peak RSS {peak_rss:,.0f} MB")
        producer_cpu = _cpu(resource.RUSAGE_SELF) - cpu_at_start
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)
    server_cpu = _cpu(resource.RUSAGE_CHILDREN)
    print(
        f"CPU seconds: producer {producer_cpu:.1f}, server {server_cpu:.1f} "
        f"({(producer_cpu + server_cpu) / elapsed:.2f} cores busy on average)"
    )


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    main()
