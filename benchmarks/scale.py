"""
The server on its two store configurations, in one run: SQLite + a local folder (one
process), PostgreSQL + an S3-compatible bucket with one replica, and with two replicas that a
client alternates between (as a load balancer would):

1. metrics ingest, 1 value per row: rows/s (requests of 50,000 rows, zstd, 4 in flight);
2. the latency of a downsampled read (1000 points) of a 1,000,000-step series;
3. episode ingest: MB/s of NDJSON (32 MiB batches of ~45 KB episodes, zstd, 2 in flight),
   last, because the server then indexes the episodes' text for search in the background.

During each phase it counts the CPU seconds of every process involved (the server replicas,
PostgreSQL's backends, the S3 endpoint, this client), so where two replicas do not help, the
output says what was busy. PostgreSQL runs durable (fsync on, synchronous_commit on: a
committed upload is on disk, as with SQLite's synchronous=FULL); the S3 endpoint is moto's
server (in memory, single Python process): the only S3-compatible server a package registry
ships here. Both are the throwaway services the tests use (tests/services.py), on loopback.

    uv run python benchmarks/scale.py            # ~5 minutes
    uv run python benchmarks/scale.py --quick    # a smoke run

Results go in docs/benchmarks.md, section "Scale-out: PostgreSQL + S3, replicas".
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.services

from tests.services import PostgresCluster, S3Endpoint, postgres_bin  # noqa: E402

import server_process  # noqa: E402
from server_ingest import episode_batches, machine, metric_batches  # noqa: E402

MiB = 1024 * 1024
TICK = os.sysconf("SC_CLK_TCK")


def start_replica(args: list[str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    return server_process.start_server(args, log)


# -- CPU accounting ------------------------------------------------------------------------------


def _cpu(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime
    except (OSError, IndexError):
        return 0.0


def _children(parent: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    if int(fh.read().rsplit(")", 1)[1].split()[1]) == parent:
                        out.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return out


def _machine_busy() -> float:
    """CPU seconds spent by every process on the machine (all cores), from /proc/stat."""
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / TICK


def _autovacuum(pid: int) -> bool:
    """A PostgreSQL autovacuum worker (its work is the database's upkeep, not our queries)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return b"autovacuum worker" in fh.read()
    except OSError:
        return False


class CpuMeter:
    """CPU seconds per group of processes over a phase, in cores (CPU seconds per second);
    groups are functions giving pids. "machine" is everything, other jobs included."""

    def __init__(self, groups: dict[str, Callable[[], list[int]]]):
        self.groups = groups

    def sample(self) -> dict[str, dict[int, float]]:
        out = {name: {pid: _cpu(pid) for pid in pids()} for name, pids in self.groups.items()}
        out["machine"] = {0: _machine_busy()}
        return out

    @contextmanager
    def phase(self, report: dict[str, Any]) -> Iterator[None]:
        before = self.sample()
        start = time.perf_counter()
        yield
        seconds = time.perf_counter() - start
        after = self.sample()
        cores = {}
        for name, pids in after.items():
            used = sum(v - before[name].get(pid, 0.0) for pid, v in pids.items())
            cores[name] = used / seconds
        report["cores"] = cores


# -- load ----------------------------------------------------------------------------------------


def post_all(urls: list[str], run_id: str, kind: str, bodies: list, workers: int) -> float:
    """POST every (body, key), request i to urls[i % len(urls)]; seconds taken."""
    clients = [
        httpx.Client(base_url=u + "/api/v1", timeout=600, limits=httpx.Limits(max_connections=8))
        for u in urls
    ]

    def post(item: tuple[int, tuple[bytes, str]]) -> None:
        i, (body, key) = item
        headers = {"Content-Encoding": "zstd", "Idempotency-Key": key}
        for _ in range(20):  # a 503 says: retry shortly
            response = clients[i % len(clients)].post(
                f"/runs/{run_id}/{kind}", content=body, headers=headers
            )
            if response.status_code != 503:
                break
            time.sleep(float(response.headers.get("Retry-After", "1")))
        response.raise_for_status()

    try:
        start = time.perf_counter()
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(post, enumerate(bodies)))
        return time.perf_counter() - start
    finally:
        for client in clients:
            client.close()


def new_run(url: str) -> str:
    return httpx.post(url + "/api/v1/runs", json={"kind": "train"}, timeout=30).json()["id"]


def read_latency(urls: list[str], run_id: str, steps: int, repeats: int) -> dict[str, float]:
    timings = []
    for i in range(repeats):
        with httpx.Client(base_url=urls[i % len(urls)] + "/api/v1", timeout=60) as client:
            start = time.perf_counter()
            body = client.get(
                f"/runs/{run_id}/metrics", params={"keys": "train/metric_0", "max_points": 1000}
            ).json()
            timings.append(time.perf_counter() - start)
            assert body["downsampled"] and len(body["series"]["train/metric_0"]["step"]) <= 1000
    timings.sort()
    return {
        "median_ms": statistics.median(timings) * 1000,
        "p95_ms": timings[int(0.95 * (len(timings) - 1))] * 1000,
    }


def run_config(
    name: str,
    urls: list[str],
    analyze: Callable[[], None] | None,
    meter: CpuMeter,
    metric_steps: int,
    episodes: tuple[list, int],
    read_steps: int,
    repeats: int,
) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name}
    metrics: dict[str, Any] = {}
    batches = metric_batches(metric_steps, 1, 50_000)
    with meter.phase(metrics):
        seconds = post_all(urls, new_run(urls[0]), "metrics", batches, workers=4)
    metrics["rows_s"] = metric_steps / seconds
    out["metrics"] = metrics

    run_id = new_run(urls[0])
    post_all(urls, run_id, "metrics", metric_batches(read_steps, 1, 50_000), workers=4)
    if analyze is not None:
        # Right after the load PostgreSQL has no statistics on the new rows yet (autovacuum
        # gathers them within a minute) and plans the first reads badly: shown apart.
        out["read_cold"] = read_latency(urls, run_id, read_steps, max(3, repeats // 5))
        analyze()
    read: dict[str, Any] = {}
    with meter.phase(read):
        read.update(read_latency(urls, run_id, read_steps, repeats))
    out["read"] = read

    # Episodes last: the server indexes their text for search in the background afterwards,
    # which would otherwise compete with the reads.
    bodies, raw_total = episodes
    episode: dict[str, Any] = {}
    with meter.phase(episode):
        seconds = post_all(urls, new_run(urls[0]), "episodes", bodies, workers=2)
    episode["mb_s"] = raw_total / MiB / seconds
    out["episodes"] = episode

    return out


def analyze(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE")


def show(result: dict[str, Any]) -> None:
    def cores(phase: dict[str, Any]) -> str:
        busy = {k: v for k, v in phase["cores"].items() if v >= 0.005}
        return ", ".join(f"{k} {v:.2f}" for k, v in busy.items())

    def ours(phase: dict[str, Any]) -> float:
        """Cores used by the processes of this deployment and its client."""
        return sum(v for k, v in phase["cores"].items() if k != "machine")

    print(f"\n== {result['name']}")
    m, e, r = result["metrics"], result["episodes"], result["read"]
    # CPU per unit of work does not depend on how much CPU other jobs left us.
    print(
        f"metrics ingest: {m['rows_s']:,.0f} rows/s, {ours(m) / m['rows_s'] * 1e6:.1f} CPU-us "
        f"per row   [cores: {cores(m)}]"
    )
    print(
        f"episode ingest: {e['mb_s']:.0f} MB/s of NDJSON, {ours(e) / e['mb_s'] * 1e3:.1f} CPU-ms "
        f"per MB   [cores: {cores(e)}]"
    )
    print(
        f"downsampled read, 1M steps -> 1000 points: {r['median_ms']:.0f} ms median, "
        f"{r['p95_ms']:.0f} ms p95   [cores: {cores(r)}]"
    )
    if cold := result.get("read_cold"):
        print(
            f"  same, before ANALYZE (no statistics yet): {cold['median_ms']:.0f} ms median, "
            f"{cold['p95_ms']:.0f} ms p95"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    args = parser.parse_args()
    metric_steps = 100_000 if args.quick else 500_000
    episode_mb = 64 if args.quick else 256
    read_steps = 100_000 if args.quick else 1_000_000
    repeats = 10 if args.quick else 30

    bindir = postgres_bin()
    if bindir is None:
        sys.exit("benchmarks/scale.py needs PostgreSQL: apt-get install postgresql")
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1"
    )
    print(f"machine: {machine()}")
    print("load average at the start: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    episodes = episode_batches(episode_mb)
    me = os.getpid()
    cluster = PostgresCluster(bindir, durable=True).start()
    s3 = S3Endpoint().start()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        postmaster = int((cluster.data / "postmaster.pid").read_text().split()[0])
        with tempfile.TemporaryDirectory(prefix="openruns-scale-") as tmp:
            configs: list[tuple[str, list[list[str]]]] = [
                ("SQLite + folder, 1 process", [["--data-dir", f"{tmp}/data"]]),
            ]
            for replicas in (1, 2):
                db = cluster.new_database()
                bucket = s3.new_bucket()
                shared = ["--db", db, "--blobs", bucket, "--s3-endpoint-url", s3.url]
                label = f"PostgreSQL + S3 (moto), {replicas} replica{'s' if replicas > 1 else ''}"
                configs.append((label, [shared] * replicas))
            results = []
            for label, replica_args in configs:
                started = [
                    start_replica(a, Path(tmp) / f"replica-{len(procs) + i}.log")
                    for i, a in enumerate(replica_args)
                ]
                procs += [p for p, _ in started]
                pids = [p.pid for p, _ in started]
                meter = CpuMeter(
                    {
                        "server": lambda pids=pids: pids,
                        "postgres": lambda: [
                            p for p in [postmaster, *_children(postmaster)] if not _autovacuum(p)
                        ],
                        "autovacuum": lambda: [p for p in _children(postmaster) if _autovacuum(p)],
                        "s3": lambda: [s3.proc.pid] if s3.proc else [],
                        "client": lambda: [me],
                    }
                )
                first = replica_args[0]
                database = next((first[i + 1] for i, x in enumerate(first) if x == "--db"), None)
                result = run_config(
                    label,
                    [u for _, u in started],
                    (lambda db=database: analyze(db)) if database else None,
                    meter,
                    metric_steps,
                    episodes,
                    read_steps,
                    repeats,
                )
                show(result)
                results.append(result)
                for proc, _ in started:
                    proc.terminate()
                    proc.wait(30)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        s3.stop()
        cluster.stop()
    print("\nload average at the end: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
