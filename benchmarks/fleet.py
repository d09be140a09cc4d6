"""
The fleet benchmark (issue 21's store rows): one dense run, its reads and export, disk per point
and per episode, and many runs into one or two replicas, against real `openruns server`
processes on loopback, on SQLite + a data directory or PostgreSQL + S3 (the throwaway,
durable PostgreSQL cluster and moto's S3 server of tests/services.py, as benchmarks/scale.py
uses them).

1. dense ingest: one run of STEPS steps x KEYS metrics, uploaded as the SDK sends it (NDJSON
   `{step, ts, values}`, zstd, each request with its Idempotency-Key, ROWS rows a request, 2
   in flight): rows/s and values/s, the server's CPU (cores) and peak RSS;
2. downsampled chart reads of that run (1000 points; one key over the whole range and over a
   10 % zoom, and all KEYS keys at once): median and p95 at the client;
3. the full export of that run (`GET /runs/{id}/export/metrics.ndjson`, streamed): its time,
   lines checked, and the server's RSS sampled while it answers (bounded: it streams);
4. disk: the store's growth per metric point (SQLite: the database file and its WAL;
   PostgreSQL: the database's size), and per episode (EPISODES episodes of ~EPISODE_KB KB, the
   database's growth and the blobs' bytes, after the search indexer has caught up);
5. (`--store postgres`) many-run ingest: RUNS runs, RUN_STEPS steps x KEYS metrics each, the
   uploads of all runs interleaved, into one replica, then into two that the client alternates
   between; CPU per process group as scale.py counts it.

Request bodies are built from 1,000 pre-serialized `values` objects (random numbers) with the
step and time written in per row, so the client spends little CPU making them; the server
parses every row as usual.

    uv run python benchmarks/fleet.py --store sqlite             # 5M x 20: ~16 minutes quiet
    uv run python benchmarks/fleet.py --store postgres --steps 1000000 --run-steps 10000
    uv run python benchmarks/fleet.py --store sqlite --quick     # a smoke run

Results go in docs/benchmarks.md, section "The fleet benchmark (issue 21)".
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import orjson
import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.services

from tests.services import PostgresCluster, S3Endpoint, postgres_bin  # noqa: E402

import server_process  # noqa: E402
from openruns.rundir import batch_key  # noqa: E402
from scale import CpuMeter, _autovacuum, _children, _cpu, analyze  # noqa: E402
from server_ingest import machine, new_run  # noqa: E402

MiB = 1024 * 1024
SPARSE_EVERY_10, SPARSE_EVERY_100 = 5, 2  # --sparse: extra metrics of every 10th, 100th row


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


# -- request bodies ------------------------------------------------------------------------------


class DenseRows:
    """Upload bodies of a dense run: rows `{step, ts, values}` of `keys` metrics; `sparse`:
    every 10th row also has SPARSE_EVERY_10 eval metrics and every 100th SPARSE_EVERY_100 more
    (names the other rows leave out, as a training loop's periodic evals)."""

    def __init__(self, keys: int, seed: int = 0, sparse: bool = False):
        rng = random.Random(seed)
        names = [f"train/metric_{k}" for k in range(keys)]
        rows = [{n: rng.random() for n in names} for _ in range(1000)]
        if sparse:
            for i, row in enumerate(rows):  # 1000 rows: step % 1000 keeps step % 10 and % 100
                extra = SPARSE_EVERY_10 * (i % 10 == 0) + SPARSE_EVERY_100 * (i % 100 == 0)
                row.update((f"eval/metric_{k}", rng.random()) for k in range(extra))
        self.values = [orjson.dumps(row) for row in rows]
        self.compressor = zstandard.ZstdCompressor(level=1)

    @staticmethod
    def points(steps: int, keys: int, sparse: bool) -> int:
        """The points of `steps` rows."""
        if not sparse:
            return steps * keys
        tenth, hundredth = -(-steps // 10), -(-steps // 100)
        return steps * keys + tenth * SPARSE_EVERY_10 + hundredth * SPARSE_EVERY_100

    def body(self, first: int, last: int) -> tuple[bytes, str]:
        """The zstd body of steps first..last-1 and its Idempotency-Key (the SDK's batch key)."""
        values = self.values
        raw = b"".join(
            b'{"step":%d,"ts":%.3f,"values":%b}\n' % (s, 1.7e9 + s, values[s % 1000])
            for s in range(first, last)
        )
        return self.compressor.compress(raw), batch_key(raw)


def post_stream(
    urls: list[str],
    uploads: Iterator[tuple[str, bytes, str]],
    in_flight: int,
    stream: str = "metrics",
) -> tuple[float, int]:
    """POST every (run id, body, key) of `uploads` to the runs' `stream`, request i to
    urls[i % n], at most `in_flight` at once (bodies are made while others are in flight);
    (seconds, requests)."""
    clients = [
        httpx.Client(base_url=u + "/api/v1", timeout=600, limits=httpx.Limits(max_connections=8))
        for u in urls
    ]

    def post(i: int, run_id: str, body: bytes, key: str) -> None:
        headers = {"Content-Encoding": "zstd", "Idempotency-Key": key}
        for _ in range(60):  # 429 / 503 say: retry after a while
            response = clients[i % len(clients)].post(
                f"/runs/{run_id}/{stream}", content=body, headers=headers
            )
            if response.status_code not in (429, 503):
                break
            time.sleep(float(response.headers.get("Retry-After", "1")))
        response.raise_for_status()

    pending: set[Future[None]] = set()
    count = 0
    try:
        start = time.perf_counter()
        with ThreadPoolExecutor(in_flight) as pool:
            for count, (run_id, body, key) in enumerate(uploads, 1):
                if len(pending) >= in_flight:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for future in done:
                        future.result()
                pending.add(pool.submit(post, count, run_id, body, key))
            for future in pending:
                future.result()
        return time.perf_counter() - start, count
    finally:
        for client in clients:
            client.close()


# -- measuring a server process ------------------------------------------------------------------


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


class RssSampler:
    """The highest VmRSS of a process, sampled every 0.1 s while in a `with`."""

    def __init__(self, pid: int):
        self.pid, self.peak, self._stop = pid, 0.0, threading.Event()

    def __enter__(self) -> RssSampler:
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.1):
            self.peak = max(self.peak, rss_mb(self.pid))

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class Deployment:
    """Where the store lives and what its size is; `server_args` for each replica."""

    def __init__(self, kind: str, tmp: Path, stack: ExitStack):
        self.kind, self.tmp = kind, tmp
        self.postmaster: int | None = None
        if kind == "postgres":
            bindir = postgres_bin()
            if bindir is None:
                sys.exit("--store postgres needs PostgreSQL: apt-get install postgresql")
            os.environ.update(
                AWS_ACCESS_KEY_ID="bench",
                AWS_SECRET_ACCESS_KEY="bench",
                AWS_DEFAULT_REGION="us-east-1",
            )
            self.cluster = PostgresCluster(bindir, durable=True).start()
            stack.callback(self.cluster.stop)
            self.s3 = S3Endpoint().start()
            stack.callback(self.s3.stop)
            self.postmaster = int((self.cluster.data / "postmaster.pid").read_text().split()[0])

    def new_store(self, name: str) -> list[str]:
        if self.kind == "sqlite":
            self.data = self.tmp / name
            return ["--data-dir", str(self.data)]
        # Empty: the server migrates it at its start, as a new deployment's does (a template
        # migrated by this checkout would be a schema another tree's server, --src, refuses).
        self.db = self.cluster.new_database(migrated=False)
        self.bucket = self.s3.new_bucket()
        return ["--db", self.db, "--blobs", self.bucket, "--s3-endpoint-url", self.s3.url]

    def database_bytes(self) -> int:
        if self.kind == "sqlite":
            # The pages in use once the WAL is checkpointed into the file (the WAL file itself
            # is reused, not grown, and freed pages are reused too).
            with sqlite3.connect(self.data / "openruns.db", timeout=60) as conn:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                used = conn.execute(
                    "SELECT (page_count - freelist_count) * page_size "
                    "FROM pragma_page_count, pragma_freelist_count, pragma_page_size"
                ).fetchone()
            return int(used[0])
        import psycopg

        with psycopg.connect(self.db, autocommit=True) as conn:
            row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
            return int(row[0]) if row else 0

    def blob_bytes(self) -> int:
        if self.kind == "sqlite":
            return sum(p.stat().st_size for p in (self.data / "blobs").rglob("*") if p.is_file())
        bucket, _, prefix = self.bucket.removeprefix("s3://").partition("/")
        pages = self.s3.client.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=prefix
        )
        return sum(o["Size"] for page in pages for o in page.get("Contents", []))

    def meter(self, pids: list[int]) -> CpuMeter:
        me, postmaster = os.getpid(), self.postmaster
        groups: dict[str, Any] = {
            "server": lambda: pids,
            "parse workers": lambda: [c for p in pids for c in _children(p)],
            "client": lambda: [me],
        }
        if postmaster is not None:
            groups["postgres"] = lambda: [
                p for p in [postmaster, *_children(postmaster)] if not _autovacuum(p)
            ]
            groups["autovacuum"] = lambda: [p for p in _children(postmaster) if _autovacuum(p)]
            groups["s3"] = lambda: [self.s3.proc.pid] if self.s3.proc else []
        return CpuMeter(groups)

    def analyze(self) -> None:
        if self.kind == "postgres":
            analyze(self.db)


def start(args: list[str], log: Path, src: str) -> tuple[subprocess.Popen[bytes], str]:
    return server_process.start_server(args, log, src=src)


def _tree_cpu(pid: int) -> float:
    """CPU seconds of a server and its children (the parse workers)."""
    return _cpu(pid) + sum(_cpu(child) for child in _children(pid))


def cores(phase: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in phase["cores"].items() if v >= 0.005)


# -- the phases ----------------------------------------------------------------------------------


def dense_ingest(
    url: str,
    pid: int,
    meter: CpuMeter,
    steps: int,
    keys: int,
    rows: int,
    prebuilt: bool = False,
    sparse: bool = False,
) -> tuple[str, dict[str, Any]]:
    """The dense run's ingest; `prebuilt`: every body built before the clock starts (the
    client then only sends, as a client on another machine costs this one nothing); `sparse`:
    see DenseRows."""
    run_id = new_run(url)
    maker = DenseRows(keys, sparse=sparse)
    uploads: Iterable[tuple[str, bytes, str]] = (
        (run_id, *maker.body(first, min(first + rows, steps))) for first in range(0, steps, rows)
    )
    if prebuilt:
        uploads = list(uploads)
    out: dict[str, Any] = {"rss_before_mb": rss_mb(pid)}
    cpu_before = _tree_cpu(pid)
    with meter.phase(out):
        seconds, requests = post_stream([url], iter(uploads), in_flight=2)
    values = DenseRows.points(steps, keys, sparse)
    out |= {
        "seconds": seconds,
        "requests": requests,
        "rows_s": steps / seconds,
        "values_s": values / seconds,
        "server_cpu_s": _tree_cpu(pid) - cpu_before,
        "peak_rss_mb": rss_mb(pid, "VmHWM"),
    }
    print(
        f"dense ingest, {steps:,} steps x {keys} metrics{' (sparse)' if sparse else ''} "
        f"({requests:,} requests of {rows:,} "
        f"rows): {out['rows_s']:,.0f} rows/s, {out['values_s']:,.0f} values/s in "
        f"{seconds:.1f} s; server CPU (parse workers included) {out['server_cpu_s']:.1f} s "
        f"({out['server_cpu_s'] / values * 1e6:.2f} CPU-us per value), RSS "
        f"{out['rss_before_mb']:.0f} MB before, peak {out['peak_rss_mb']:.0f} MB   "
        f"[cores: {cores(out)}]   load {load()}",
        flush=True,
    )
    return run_id, out


def chart_reads(url: str, run_id: str, steps: int, keys: int, repeats: int) -> dict[str, Any]:
    every = ",".join(f"train/metric_{k}" for k in range(keys))
    zoom = {"step_min": steps // 2, "step_max": steps // 2 + steps // 10 - 1}
    cases: dict[str, dict[str, Any]] = {
        "1 key, whole range": {"keys": "train/metric_0"},
        "1 key, 10 % zoom": {"keys": "train/metric_0", **zoom},
        f"{keys} keys, whole range": {"keys": every},
    }
    out: dict[str, Any] = {}
    with httpx.Client(base_url=url + "/api/v1", timeout=120) as client:
        for name, params in cases.items():
            timings = []
            for _ in range(repeats):
                begin = time.perf_counter()
                response = client.get(
                    f"/runs/{run_id}/metrics", params={**params, "max_points": 1000}
                )
                timings.append(time.perf_counter() - begin)
                body = response.raise_for_status().json()
                series = body["series"]
                assert len(series) == params["keys"].count(",") + 1, response.text[:300]
                assert all(len(s["step"]) <= 1000 for s in series.values())
            timings.sort()
            out[name] = (
                statistics.median(timings) * 1000,
                timings[int(0.95 * (len(timings) - 1))] * 1000,
            )
            print(
                f"chart read, {name} -> 1000 points: {out[name][0]:.0f} ms median, "
                f"{out[name][1]:.0f} ms p95 ({repeats} reads)",
                flush=True,
            )
    return out


def export(url: str, pid: int, run_id: str, points: int) -> dict[str, Any]:
    lines = size = 0
    rss_before = rss_mb(pid)
    with RssSampler(pid) as rss, httpx.Client(base_url=url + "/api/v1", timeout=600) as client:
        begin = time.perf_counter()
        with client.stream("GET", f"/runs/{run_id}/export/metrics.ndjson") as response:
            response.raise_for_status()
            tail = b""
            for piece in response.iter_bytes(MiB):
                size += len(piece)
                lines += piece.count(b"\n")
                tail = (tail + piece)[-200:]
        seconds = time.perf_counter() - begin
    assert lines == points, f"the export has {lines:,} lines, not {points:,}: {tail!r}"
    out = {"seconds": seconds, "mb": size / MiB, "rss_before": rss_before, "rss_peak": rss.peak}
    print(
        f"export (metrics.ndjson, streamed): {points:,} lines, {size / MiB:,.0f} MiB in "
        f"{seconds:.1f} s ({points / seconds:,.0f} lines/s); server RSS {rss_before:.0f} MB "
        f"before, at most {rss.peak:.0f} MB while answering   load {load()}",
        flush=True,
    )
    return out


def episode_bodies(count: int, kb: int, per_upload: int = 2000) -> Iterator[tuple[bytes, str]]:
    """zstd NDJSON bodies of `count` chat-shaped episodes of ~`kb` KB each."""
    rng = random.Random(2)
    words = ["the", "model", "answer", "tool", "call", "result", "reasoning", "step", "value"]
    compressor = zstandard.ZstdCompressor(level=1)
    for first in range(0, count, per_upload):
        lines = []
        for i in range(first, min(first + per_upload, count)):
            text = " ".join(rng.choices(words, k=kb * 1024 // 12))
            record = {
                "id": f"e{i}",
                "run": {"work": {"step": i // 64}},
                "env": "math",
                "traces": [
                    {
                        "reward": rng.random(),
                        "num_total_tokens": kb * 256,
                        "messages": [
                            {"role": "user", "content": text},
                            {"role": "assistant", "content": text},
                        ],
                    }
                ],
            }
            lines.append(orjson.dumps(record) + b"\n")
        raw = b"".join(lines)
        yield compressor.compress(raw), batch_key(raw)


def episode_disk(url: str, pid: int, store: Deployment, count: int, kb: int) -> dict[str, Any]:
    db_before, blobs_before = store.database_bytes(), store.blob_bytes()
    run_id = new_run(url)
    raw = 0

    def uploads() -> Iterator[tuple[str, bytes, str]]:
        nonlocal raw
        for body, key in episode_bodies(count, kb):
            raw += zstandard.get_frame_parameters(body).content_size
            yield run_id, body, key

    # Two uploads in flight, the next body made meanwhile (the SDK's records lane sends up to
    # eight): the server is not left idle while the client builds a body (0.16 s of CPU each).
    seconds, _ = post_stream([url], uploads(), in_flight=2, stream="episodes")
    # The search indexer reads every record behind ingest and its entries are disk too: wait
    # until the server is idle (under 5 % of a core over two seconds).
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        before = _cpu(pid)
        time.sleep(2)
        if _cpu(pid) - before < 0.1:
            break
    db = store.database_bytes() - db_before
    blobs = store.blob_bytes() - blobs_before
    print(
        f"episodes: {count:,} of {raw / count / 1024:.1f} KB NDJSON each, ingested at "
        f"{count / seconds:,.0f} episodes/s; database +{db / count:,.0f} B per episode, blobs "
        f"+{blobs / count:,.0f} B per episode ({raw / max(1, blobs):.1f}x smaller than the "
        f"NDJSON)   load {load()}",
        flush=True,
    )
    episode_reads(url, run_id, count, repeats=10)
    return {"db_per_episode": db / count, "blobs_per_episode": blobs / count}


def episode_reads(url: str, run_id: str, count: int, repeats: int) -> None:
    """The rollouts view's reads of the episodes' run (episode_bodies: 64 a step), p50 / p95
    after one read to warm: a step's page, one record, run-wide pages, the steps list."""
    step = count // 64 // 2
    path = f"/runs/{run_id}/episodes"
    cases: dict[str, tuple[str, dict[str, Any]]] = {
        "a step's page by -reward": (path, {"step": step, "sort": "-reward", "limit": 100}),
        "one episode by id": (f"{path}/e{count // 2}", {}),
        "the run's first page by step": (path, {"limit": 100}),
        "the run's first page by -reward": (path, {"sort": "-reward", "limit": 100}),
        "the run's first page of env=math by reward": (
            path,
            {"sort": "reward", "env": "math", "limit": 100},
        ),
        "the newest 500 steps": (f"/runs/{run_id}/steps", {"order": "desc", "limit": 500}),
    }
    with httpx.Client(base_url=url + "/api/v1", timeout=120) as client:
        for name, (route, params) in cases.items():
            timings = []
            for _ in range(repeats + 1):
                begin = time.perf_counter()
                client.get(route, params=params).raise_for_status()
                timings.append(time.perf_counter() - begin)
            timings = sorted(timings[1:])
            print(
                f"episode read at {count:,} episodes, {name}: "
                f"{statistics.median(timings) * 1000:.0f} ms median, "
                f"{timings[int(0.95 * (len(timings) - 1))] * 1000:.0f} ms p95 ({repeats} reads)",
                flush=True,
            )


def many_runs(
    urls: list[str], meter: CpuMeter, runs: int, steps: int, keys: int, rows: int
) -> dict[str, Any]:
    """Uploads of `runs` runs interleaved (run 0's first, run 1's first, ...)."""
    run_ids = [new_run(urls[0]) for _ in range(runs)]
    maker = DenseRows(keys, seed=3)
    uploads = (
        (run_id, *maker.body(first, min(first + rows, steps)))
        for first in range(0, steps, rows)
        for run_id in run_ids
    )
    out: dict[str, Any] = {}
    with meter.phase(out):
        seconds, requests = post_stream(urls, uploads, in_flight=4)
    total = runs * steps
    ours = sum(v for k, v in out["cores"].items() if k != "machine")
    print(
        f"many-run ingest, {len(urls)} replica(s), {runs} runs x {steps:,} steps x {keys} "
        f"metrics: {total / seconds:,.0f} rows/s, {total * keys / seconds:,.0f} values/s "
        f"({seconds:.1f} s), {ours / (total * keys / seconds) * 1e6:.2f} CPU-us per value   "
        f"[cores: {cores(out)}]   load {load()}",
        flush=True,
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument("--steps", type=int, help="steps of the dense run (5,000,000)")
    parser.add_argument("--keys", type=int, default=20, help="metrics per row (20)")
    parser.add_argument("--rows", type=int, default=10_000, help="rows per upload (10,000)")
    parser.add_argument("--repeats", type=int, default=30, help="reads per chart case (30)")
    parser.add_argument("--episodes", type=int, help="episodes for disk per episode (50,000)")
    parser.add_argument("--episode-kb", type=int, default=4, help="size of an episode (4 KB)")
    parser.add_argument("--runs", type=int, default=20, help="runs of the many-run phase (20)")
    parser.add_argument("--run-steps", type=int, help="steps per run, many-run phase (20,000)")
    parser.add_argument("--skip-export", action="store_true", help="leave the export out")
    parser.add_argument(
        "--sparse",
        action="store_true",
        help=f"the dense run's every 10th row has {SPARSE_EVERY_10} more metrics, every 100th "
        f"{SPARSE_EVERY_100} more (names the other rows leave out)",
    )
    parser.add_argument(
        "--src",
        default=server_process.SRC,
        help="the server code to run (another checkout's src, to measure a change in turns)",
    )
    parser.add_argument(
        "--prebuilt",
        action="store_true",
        help="build the dense run's bodies before its clock starts (~2 MB each, held in memory)",
    )
    args = parser.parse_args()
    steps = args.steps or (100_000 if args.quick else 5_000_000)
    episodes = args.episodes or (5_000 if args.quick else 50_000)
    run_steps = args.run_steps or (2_000 if args.quick else 20_000)

    print(f"machine: {machine()}; store: {args.store}")
    print(f"load average at the start: {load()}", flush=True)
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="openruns-fleet-")))
        store = Deployment(args.store, tmp, stack)
        proc, url = start(store.new_store("dense"), tmp / "dense.log", args.src)
        stack.callback(proc.kill)
        empty = store.database_bytes()
        run_id, _ = dense_ingest(
            url,
            proc.pid,
            store.meter([proc.pid]),
            steps,
            args.keys,
            args.rows,
            args.prebuilt,
            args.sparse,
        )
        points = DenseRows.points(steps, args.keys, args.sparse)
        grown = store.database_bytes() - empty
        print(
            f"disk: database +{grown / MiB:,.0f} MiB for {points:,} points = "
            f"{grown / points:.1f} B per point (points, block summaries, keys)",
            flush=True,
        )
        store.analyze()
        chart_reads(url, run_id, steps, args.keys, 10 if args.quick else args.repeats)
        if not args.skip_export:
            export(url, proc.pid, run_id, points)
        episode_disk(url, proc.pid, store, episodes, args.episode_kb)
        proc.terminate()
        proc.wait(30)
        if args.store == "postgres":
            for replicas in (1, 2):
                shared = store.new_store(f"many-{replicas}")
                started = [
                    start(shared, tmp / f"many-{replicas}-{i}.log", args.src)
                    for i in range(replicas)
                ]
                for p, _ in started:
                    stack.callback(p.kill)
                meter = store.meter([p.pid for p, _ in started])
                many_runs([u for _, u in started], meter, args.runs, run_steps, args.keys, 1_000)
                for p, _ in started:
                    p.terminate()
                    p.wait(30)
    print(f"load average at the end: {load()}")


if __name__ == "__main__":
    main()
