"""
One run's metrics at scale (issue 21), against a real `openruns server` process on loopback
(SQLite and a data directory; `--store postgres`: PostgreSQL + an S3 bucket, the tests'
throwaway services of tests/services.py, durable, moto's server for S3):

1. upload: one upload of 1,000,000 metric rows (~55 MB of NDJSON, zstd); the server's peak RSS
   (VmHWM of /proc/<pid>/status) before and after it, and the time to its receipt (target:
   peak RSS at most +200 MB). `--src DIR` runs another checkout's server code (e.g. the main
   branch's, to measure before and after with the same harness);
2. keys: one run of 100,000 metric keys (5 steps each): pages of keys by name (first, middle,
   last), by recent order, searched (q) and by prefix; a series read of 500 keys; every series
   of the run through `openruns.api.Client.metrics` (groups of 500 keys);
3. pages: that run in headless Chromium: the run page until its 40 charts are drawn, with the
   main thread's long tasks and the JS heap after; the runs page until its rows and column
   chooser are in (target: the run page usable in <= 2 s).

    uv run python benchmarks/metric_keys.py                  # all three
    uv run python benchmarks/metric_keys.py --part upload --src /work/main/src
    uv run python benchmarks/metric_keys.py --part keys --store postgres

Results go in docs/benchmarks.md, section "One run's metrics at scale".
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import orjson
import zstandard

import server_process  # benchmarks/server_process.py
from chromium import CHROMIUM, CHROMIUM_ARGS  # benchmarks/chromium.py
from server_process import SRC

MiB = 1024 * 1024


@contextmanager
def store_args(store: str) -> Iterator[list[str]]:
    """The `openruns server` arguments of a fresh store of this kind."""
    if store == "sqlite":
        with tempfile.TemporaryDirectory(prefix="openruns-keys-") as tmp:
            yield ["--data-dir", f"{tmp}/data"]
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.services
    from tests.services import PostgresCluster, S3Endpoint, postgres_bin

    bindir = postgres_bin()
    if bindir is None:
        sys.exit("--store postgres needs PostgreSQL: apt-get install postgresql")
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1"
    )
    cluster = PostgresCluster(bindir, durable=True).start()
    s3 = S3Endpoint().start()
    try:
        # Migrated by the server it serves (`--src` may be older code).
        db, bucket = cluster.new_database(migrated=False), s3.new_bucket()
        yield ["--db", db, "--blobs", bucket, "--s3-endpoint-url", s3.url]
    finally:
        s3.stop()
        cluster.stop()


def start_server(args: list[str], src: str) -> tuple[subprocess.Popen[bytes], str]:
    """`openruns server --port 0 ARGS` of the code in `src`, its log in a temporary file."""
    log = Path(tempfile.mkstemp(prefix="openruns-keys-", suffix=".log")[1])
    return server_process.start_server(args, log, src=src)


def memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak) of a process, in bytes."""
    text = Path(f"/proc/{pid}/status").read_text()
    out = {}
    for name in ("VmRSS", "VmHWM"):
        match = re.search(rf"{name}:\s+(\d+) kB", text)
        assert match is not None, text
        out[name] = int(match.group(1)) * 1024
    return out


def new_run(http: httpx.Client, name: str) -> str:
    return http.post("/runs", json={"kind": "train", "name": name}).json()["id"]


def post(http: httpx.Client, run_id: str, raw: bytes) -> tuple[float, httpx.Response]:
    body = zstandard.ZstdCompressor(level=3).compress(raw)
    started = time.perf_counter()
    answer = http.post(
        f"/runs/{run_id}/metrics", content=body, headers={"Content-Encoding": "zstd"}
    )
    return time.perf_counter() - started, answer


# -- 1. one upload of 1,000,000 rows ------------------------------------------------------------


def million_rows(rows: int) -> bytes:
    return b"".join(
        orjson.dumps({"step": i, "ts": 1.7e9 + i, "values": {"loss": i % 1000 / 1000}}) + b"\n"
        for i in range(rows)
    )


def bench_upload(src: str, rows: int, store: str) -> dict:
    raw = million_rows(rows)
    with store_args(store) as args:
        proc, url = start_server(args, src)
        try:
            with httpx.Client(base_url=url + "/api/v1", timeout=600) as http:
                # Warm up every path of an upload first, so the baseline includes them.
                warm = new_run(http, "warm")
                post(http, warm, million_rows(1000))
                before = memory(proc.pid)
                run_id = new_run(http, "million")
                seconds, answer = post(http, run_id, raw)
                answer.raise_for_status()
                after = memory(proc.pid)
                read = http.get(f"/runs/{run_id}/metrics", params={"max_points": 0}).json()
                exact = read["series"]["loss"]["step"] == list(range(rows))
        finally:
            proc.terminate()
            proc.wait(30)
    return {
        "src": src,
        "store": store,
        "rows": rows,
        "raw_mb": len(raw) / MiB,
        "zstd_mb": len(zstandard.ZstdCompressor(level=3).compress(raw)) / MiB,
        "seconds": seconds,
        "rss_before_mb": before["VmRSS"] / MiB,
        "peak_before_mb": before["VmHWM"] / MiB,
        "peak_after_mb": after["VmHWM"] / MiB,
        "peak_growth_mb": (after["VmHWM"] - before["VmRSS"]) / MiB,
        "read_back_exactly": exact,
        "load": os.getloadavg()[0],
    }


# -- 2. keys and series of a run of 100,000 keys ------------------------------------------------


def seed_keys(http: httpx.Client, keys: int, steps: int) -> str:
    run_id = new_run(http, f"keys-{keys}")
    names = [f"layer{i // 1000:03d}/block{i // 10 % 100:02d}/m{i % 10}" for i in range(keys)]
    started = time.perf_counter()
    for step in range(steps):
        values = {name: float(i + step) for i, name in enumerate(names)}
        raw = orjson.dumps({"step": step, "ts": 1.7e9 + step, "values": values}) + b"\n"
        _, answer = post(http, run_id, raw)
        answer.raise_for_status()
    print(f"  seeded {keys:,} keys x {steps} steps in {time.perf_counter() - started:.0f} s")
    return run_id


def timed(fn, repeats: int = 5) -> tuple[float, object]:
    """Median ms of `repeats` calls, and the last result."""
    times, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), result


def bench_keys(url: str, run_id: str) -> list[dict]:
    out = []
    path = f"/runs/{run_id}/metrics/keys"
    with httpx.Client(base_url=url + "/api/v1", timeout=300) as http:

        def get(params: dict, route: str = path) -> httpx.Response:
            answer = http.get(route, params=params)
            answer.raise_for_status()
            return answer

        def case(name: str, params: dict, route: str = path) -> None:
            ms, answer = timed(lambda: get(params, route))
            body = answer.json()
            items = len(body["items"]) if "items" in body else len(body.get("series", {}))
            out.append({"read": name, "ms": ms, "items": items, "kb": len(answer.content) / 1024})

        case("keys: first page (500, by name)", {"limit": 500})
        middle = get({"limit": 5000})
        for _ in range(9):
            middle = get({"limit": 5000, "cursor": middle.json()["next_cursor"]})
        after = middle.json()["next_cursor"]
        case("keys: page after 50,000 (500)", {"limit": 500, "cursor": after})
        case("keys: first page, order=recent (500)", {"limit": 500, "order": "recent"})
        case("keys: q=block42/m7 (500)", {"q": "block42/m7", "limit": 500})
        case("keys: prefix=layer099/ (500)", {"prefix": "layer099/", "limit": 500})
        names = [row["key"] for row in get({"limit": 500}).json()["items"]]
        case(
            "series: 500 keys, max_points=1000",
            {"keys": ",".join(names), "max_points": 1000},
            f"/runs/{run_id}/metrics",
        )
        refused = http.get(path)
        name = f"keys: one list (refused: {refused.status_code})"
        out.append({"read": name, "ms": 0.0, "items": 0, "kb": 0.0})
    from openruns.api import Client

    with Client(base_url=url) as client:
        started = time.perf_counter()
        rows = client.metrics(run_id)
        ms = (time.perf_counter() - started) * 1000
    out.append({"read": "Client.metrics: every series", "ms": ms, "items": len(rows), "kb": 0})
    return out


# -- 3. the pages in Chromium -------------------------------------------------------------------

PROBE = """
window.__probe = {longTasks: [], charts: null, note: null};
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) window.__probe.longTasks.push([e.startTime, e.duration]);
}).observe({type: "longtask", buffered: true});
new MutationObserver(() => {
  const p = window.__probe;
  const note = document.getElementById("keys-note");
  if (p.note === null && note && note.textContent) p.note = performance.now();
  const drawn = document.querySelectorAll('figure.chart[data-drawn="true"]').length;
  if (p.charts === null && drawn >= 40) p.charts = performance.now();
  const rows = document.querySelectorAll("#runs tbody tr[data-run-id] td.num");
  const filled = rows.length && [...rows].at(-1).textContent !== "—";
  if (p.rows === undefined && filled) p.rows = performance.now();
}).observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
"""


def bench_pages(url: str, run_id: str, repeats: int) -> list[dict]:
    from playwright.sync_api import sync_playwright

    out = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            args=CHROMIUM_ARGS,
        )
        context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=url)
        context.add_init_script(PROBE)
        for i in range(repeats):
            for name, path, ready in (
                ("run page", f"/runs/{run_id}", "window.__probe.charts !== null"),
                ("runs page", "/", "window.__probe.rows !== undefined"),
            ):
                page = context.new_page()
                page.goto(path)
                page.wait_for_function(f"() => {ready}", timeout=120_000, polling=50)
                page.wait_for_timeout(300)
                probe = page.evaluate("window.__probe")
                heap = page.evaluate("performance.memory.usedJSHeapSize") / MiB
                inputs = page.locator("#columns-metrics input").count()
                tasks = probe["longTasks"]
                done = probe["charts"] if name == "run page" else probe["rows"]
                out.append(
                    {
                        "page": name,
                        "cold": i == 0,
                        "note_ms": probe["note"] or 0.0,
                        "ready_ms": done,
                        "interactive_ms": max(done, max((t + d for t, d in tasks), default=0.0)),
                        "tbt_ms": sum(max(0.0, d - 50) for _, d in tasks),
                        "heap_mb": heap,
                        "chooser_inputs": inputs,
                        "load": os.getloadavg()[0],
                    }
                )
                page.close()
        context.close()
        browser.close()
    return out


# -- main ---------------------------------------------------------------------------------------


def table(rows: list[dict]) -> str:
    columns = list(rows[0])

    def cell(v: object) -> str:
        return f"{v:.1f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(cell(r[c]) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("upload", "keys", "pages", "all"), default="all")
    parser.add_argument("--src", default=SRC, help="the server code to run (--part upload)")
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3, help="page loads (the first cold)")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}", flush=True)
    if args.part in ("upload", "all"):
        print(table([bench_upload(args.src, args.rows, args.store)]), flush=True)
    if args.part in ("keys", "pages", "all"):
        with store_args(args.store) as server_args:
            proc, url = start_server(server_args, SRC)
            try:
                with httpx.Client(base_url=url + "/api/v1", timeout=600) as http:
                    run_id = seed_keys(http, args.keys, args.steps)
                    http.post(f"/runs/{run_id}/finish", json={"status": "completed"})
                if args.part in ("keys", "all"):
                    print(table(bench_keys(url, run_id)), flush=True)
                if args.part in ("pages", "all"):
                    print(table(bench_pages(url, run_id, args.repeats)), flush=True)
            finally:
                proc.terminate()
                proc.wait(30)
    print(f"load average at end: {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
