"""
The production-sized load test of online runs, against a local `openruns server` process.

    uv run python benchmarks/online_load.py --episodes 1000            # ~8.7 GB of JSON
    uv run python benchmarks/online_load.py --episodes 10000 --fixed-mb 2.2   # the scale variant
    uv run python benchmarks/online_load.py --episodes 50     # the quick one (make load-test)
    uv run python benchmarks/online_load.py --burst 10000     # small episodes, one call / many

The producer is an asyncio loop, like a trainer's orchestrator: it logs each episode (and a row
of metrics per 16 episodes) from the loop, timing every call, while a lag sampler task records
how late each 1 ms sleep wakes. The server runs in its own process on a temporary data
directory. The report: delivered / dropped / failed, log_episodes and log_metrics max, loop lag
p50/p99/max, MB/s of JSON and episodes/s, the producer's peak RSS above what it held before
init(), CPU seconds of producer and server (and the server's per GB of JSON), and the
single-core orjson + zstd-1 throughput on the same episodes, measured in the same run, as the
limit. `--burst N`: N small episodes in one log_episodes call, then N in N calls, each to its
own run: how many arrive.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import orjson
import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parent))
import openruns  # noqa: E402
import server_process  # noqa: E402
from episodes import EpisodeFactory  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


# `--no-search-index`: the server without its full-text indexer (issue 14's), which reads every
# record behind ingest at up to a quarter of a core: so ingest's own CPU can be measured apart.


def start_server(data_dir: Path, search_index: bool = True) -> tuple[subprocess.Popen[bytes], str]:
    args = ["--data-dir", str(data_dir)]
    return server_process.start_server(
        args, data_dir.with_suffix(".log"), search_index=search_index
    )


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


async def produce(run, factory, sizes, lags, net) -> tuple[list[float], list[float], float]:
    """Log every episode from the loop; `lags`: how late each 1 ms sleep woke; `net`: the same
    less the time the loop's thread waited for a CPU (run queue: other threads and processes
    had both cores), which leaves what this process's own threads held it for (the GIL)."""
    stop = asyncio.Event()
    schedstat = os.open(f"/proc/self/task/{threading.get_native_id()}/schedstat", os.O_RDONLY)

    def waited_for_cpu() -> float:
        return int(os.pread(schedstat, 128, 0).split()[1]) / 1e9

    async def sampler() -> None:
        while not stop.is_set():
            t0, queued = time.perf_counter(), waited_for_cpu()
            await asyncio.sleep(0.001)
            lag = time.perf_counter() - t0 - 0.001
            lags.append(lag)
            net.append(max(0.0, lag - (waited_for_cpu() - queued)))

    task = asyncio.create_task(sampler())
    episode_calls: list[float] = []
    metric_calls: list[float] = []
    start = time.perf_counter()
    for i, size in enumerate(sizes):
        episode = factory.episode(i, size, step=i // 16)
        t0 = time.perf_counter()
        run.log_episodes([episode])
        episode_calls.append(time.perf_counter() - t0)
        if i % 16 == 15:
            values = {f"train/m{k}": i / (k + 1) for k in range(20)}
            t0 = time.perf_counter()
            run.log_metrics(values, step=i // 16)
            metric_calls.append(time.perf_counter() - t0)
        await asyncio.sleep(0)  # the orchestrator does other work between episodes
    logged = time.perf_counter() - start
    await asyncio.to_thread(run.finish, timeout=1800)
    stop.set()
    await task
    os.close(schedstat)
    return episode_calls, metric_calls, logged


def delivered(url: str, run_id: str) -> int:
    count, cursor = 0, None
    while True:
        params = {"limit": 1000, **({"cursor": cursor} if cursor else {})}
        page = httpx.get(f"{url}/api/v1/runs/{run_id}/episodes", params=params, timeout=120)
        page.raise_for_status()
        body = page.json()
        count += len(body["items"])
        cursor = body.get("next_cursor")
        if not cursor:
            return count


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def load_test(args: argparse.Namespace, url: str, tmp: Path, server_pid: int) -> None:
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
    del sample

    load_before = os.getloadavg()
    baseline_rss = _reset_peak_rss()
    cpu_start, server_start = _cpu(resource.RUSAGE_SELF), _process_cpu(server_pid)
    run = openruns.init(kind="train", name="load-test", base_url=url, dir=tmp / "local")
    lags: list[float] = []
    net: list[float] = []
    start = time.perf_counter()
    episode_calls, metric_calls, logged = asyncio.run(produce(run, factory, sizes, lags, net))
    elapsed = time.perf_counter() - start
    producer_cpu = _cpu(resource.RUSAGE_SELF) - cpu_start
    server_cpu = _process_cpu(server_pid) - server_start
    peak_rss = _peak_rss()
    load_after = os.getloadavg()

    arrived = delivered(url, run.id)
    print(f"episodes: {args.episodes} ({total_mb:,.0f} MB of JSON), {os.cpu_count()} cores")
    print(
        f"delivered {arrived}/{args.episodes}  dropped {run.dropped_records}  "
        f"failed {run.failed_records}  spooled {run.spooled_records}  errors {run.errors}"
    )
    print(
        f"log_episodes max {max(episode_calls) * 1000:.3f} ms (p99 "
        f"{pct(episode_calls, 0.99) * 1000:.3f});  log_metrics (20 values) max "
        f"{max(metric_calls, default=0) * 1000:.3f} ms (p50 {pct(metric_calls, 0.5) * 1e6:.1f} µs)"
    )
    print(
        f"loop lag p50 {pct(lags, 0.5) * 1000:.2f} ms  p99 {pct(lags, 0.99) * 1000:.2f} ms  "
        f"max {max(lags) * 1000:.2f} ms;  net of waits for a CPU: p99 "
        f"{pct(net, 0.99) * 1000:.2f} ms  max {max(net) * 1000:.2f} ms"
    )
    print(
        f"throughput {total_mb / elapsed:,.0f} MB/s of JSON, {args.episodes / elapsed:,.1f} "
        f"episodes/s ({elapsed:.1f} s; all log calls returned after {logged:.1f} s)"
    )
    print(
        f"single-core orjson + zstd-1 limit {limit:,.0f} MB/s "
        f"({100 * total_mb / elapsed / limit:.0f} % of it)"
    )
    print(
        f"producer peak RSS {peak_rss:,.0f} MB, {peak_rss - baseline_rss:+,.0f} MB above the "
        f"{baseline_rss:,.0f} MB it held before init()"
    )
    print(
        f"CPU seconds: producer {producer_cpu:.1f}, server {server_cpu:.1f} "
        f"({server_cpu / (total_mb / 1000):.2f} CPU-s per GB; "
        f"{(producer_cpu + server_cpu) / elapsed:.2f} cores busy on average)"
    )
    print(f"load average before {_load(load_before)}, after {_load(load_after)}")
    if args.no_search_index:
        print("(the server ran without its search indexer)")


def burst_test(n: int, url: str, tmp: Path) -> None:
    episodes = [
        {"id": f"b{i}", "env": "math", "reward": i % 2, "traces": [{"text": "x" * 2000}]}
        for i in range(n)
    ]
    for how in ("one call", f"{n} calls"):
        run = openruns.init(kind="eval", name=f"burst {how}", base_url=url, dir=tmp / "local")
        t0 = time.perf_counter()
        if how == "one call":
            run.log_episodes(episodes)
        else:
            for episode in episodes:
                run.log_episodes([episode])
        logged = time.perf_counter() - t0
        run.finish()
        print(
            f"{n} small episodes in {how}: delivered {delivered(url, run.id)}/{n}, dropped "
            f"{run.dropped_records} (logged in {logged * 1000:.0f} ms)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--fixed-mb", type=float, default=None, help="every episode this size")
    parser.add_argument("--burst", type=int, default=0, help="N small episodes instead")
    parser.add_argument("--tmp", default=None, help="where the server's data goes")
    parser.add_argument(
        "--no-search-index",
        action="store_true",
        help="run the server without its full-text indexer (to measure ingest alone)",
    )
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="openruns-load-", dir=args.tmp))
    server, url = start_server(tmp / "server", search_index=not args.no_search_index)
    try:
        if args.burst:
            burst_test(args.burst, url, tmp)
        else:
            load_test(args, url, tmp, server.pid)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:  # the search indexer may still be working through it
            server.kill()
            server.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _process_cpu(pid: int) -> float:
    """CPU seconds (user + system) of another process so far, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _reset_peak_rss() -> float:
    """Reset the kernel's peak-RSS mark of this process (clear_refs 5); the RSS now, in MB."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status_mb("VmRSS")


def _peak_rss() -> float:
    return _status_mb("VmHWM")


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _load(values: tuple[float, float, float]) -> str:
    return " ".join(f"{v:.2f}" for v in values)


if __name__ == "__main__":
    main()
