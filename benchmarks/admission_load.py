"""
Many SDK runs from one host at once, against a local `openruns server` process (issue 21's
admission rows): how the server shares its upload slots between runs.

    uv run python benchmarks/admission_load.py                          # 10 processes x 10 runs
    uv run python benchmarks/admission_load.py --processes 20           # 200 runs
    uv run python benchmarks/admission_load.py --src /tmp/before/src    # another server's code
    uv run python benchmarks/admission_load.py --sdk-src /work/main/src  # another SDK's code

Each producer process holds `--runs` SDK runs, one thread each; every run logs `--rows` metric
rows and `--episodes` episodes spread evenly over `--seconds`, then calls finish(). Auth is off,
so every request comes from one caller (127.0.0.1). The producers start together (each says it
is ready, then waits for the word). Each producer times its requests at the transport (httpx),
so the report has every HTTP status the server answered and the latency of each upload (a
metrics or episodes request, whatever its answer). Then every run is read back: rows and
episodes lost or duplicated, and its final status.

The report: finish() p50/p99/max, upload latency p50/p99, 429s and 503s as a share of all
requests, the server's CPU per request it stored, lost and duplicated, the load average before
and after.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import server_process  # noqa: E402

HERE = Path(__file__).resolve()


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _instrument(requests: list[tuple[str, int, float]]) -> None:
    """Record (what, status, seconds) of every request the SDK makes, at httpx's transport."""
    send = httpx.HTTPTransport.handle_request
    lock = threading.Lock()

    def timed(self: httpx.HTTPTransport, request: httpx.Request) -> httpx.Response:
        start = time.perf_counter()
        path = request.url.path
        what = path.rsplit("/", 1)[-1] if path.endswith(("/metrics", "/episodes")) else "other"
        try:
            response = send(self, request)
        except Exception:
            with lock:
                requests.append((what, 0, time.perf_counter() - start))
            raise
        # The body is read by the caller: the time to the answer's head is the wait.
        with lock:
            requests.append((what, response.status_code, time.perf_counter() - start))
        return response

    httpx.HTTPTransport.handle_request = timed  # type: ignore[method-assign]


def producer(args: argparse.Namespace) -> None:
    import openruns

    requests: list[tuple[str, int, float]] = []
    _instrument(requests)
    sys.stdout.write(f"ready {Path(openruns.__file__).parent}\n")
    sys.stdout.flush()
    sys.stdin.readline()
    runs: list[dict[str, object]] = []
    lock = threading.Lock()

    def one_run(index: int) -> None:
        run = openruns.init(
            kind="train",
            name=f"p{args.producer}-r{index}",
            base_url=args.url,
            dir=Path(args.tmp) / f"p{args.producer}-r{index}",
        )
        pause = args.seconds / args.rows
        every = max(1, args.rows // max(1, args.episodes))
        episode = 0
        for step in range(args.rows):
            run.log_metrics({"loss": 1.0 / (step + 1), "reward": step % 7}, step=step)
            if step % every == 0 and episode < args.episodes:
                run.log_episodes(
                    [
                        {
                            "id": f"e{episode}",
                            "env": "math",
                            "run": {"work": {"step": step}},
                            "traces": [{"reward": 0.5, "text": "the answer is 42 " * 100}],
                        }
                    ]
                )
                episode += 1
            time.sleep(pause)
        start = time.perf_counter()
        run.finish()
        took = time.perf_counter() - start
        with lock:
            runs.append(
                {
                    "id": run.id,
                    "finish_s": took,
                    "dropped": run.dropped_records,
                    "failed": sum(run.failed_records.values()),
                    "spooled": run.spooled_records,
                }
            )

    threads = [threading.Thread(target=one_run, args=(i,)) for i in range(args.runs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sys.stdout.write(json.dumps({"runs": runs, "requests": requests}) + "\n")


def read_back(url: str, run_id: str) -> tuple[int, int, int, str]:
    """(metric points of `loss`, episode rows, distinct episode ids, status) of one run."""
    with httpx.Client(base_url=url, timeout=120) as http:
        series = http.get(
            f"/api/v1/runs/{run_id}/metrics", params={"keys": "loss", "max_points": 0}
        ).json()["series"]
        points = len(series.get("loss", {}).get("step", [])) if series else 0
        ids: list[str] = []
        cursor = None
        while True:
            params = {"limit": 1000, **({"cursor": cursor} if cursor else {})}
            page = http.get(f"/api/v1/runs/{run_id}/episodes", params=params).json()
            ids += [item["id"] for item in page["items"]]
            cursor = page["next_cursor"]
            if not cursor:
                break
        status = http.get(f"/api/v1/runs/{run_id}").json()["status"]
    return points, len(ids), len(set(ids)), status


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, default=10)
    parser.add_argument("--runs", type=int, default=10, help="runs per process")
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--src", help="the server's code (a src directory), default this tree's")
    parser.add_argument("--sdk-src", help="the SDK's code (a src directory), default this tree's")
    parser.add_argument("--producer", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--tmp", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.producer is not None:
        producer(args)
        return

    if args.src:
        server_process.SRC = str(Path(args.src).resolve())
    tmp = Path(tempfile.mkdtemp(prefix="openruns-admission-"))
    proc, url = server_process.start_server(["--data-dir", str(tmp / "data")], tmp / "server.log")
    try:
        common = [
            *("--runs", str(args.runs), "--rows", str(args.rows)),
            *("--episodes", str(args.episodes), "--seconds", str(args.seconds)),
            *("--url", url, "--tmp", str(tmp / "sdk")),
        ]
        env = dict(os.environ)
        if args.sdk_src:  # ahead of the installed package: `import openruns` finds it first
            env["PYTHONPATH"] = str(Path(args.sdk_src).resolve())
        producers = [
            subprocess.Popen(
                [sys.executable, str(HERE), "--producer", str(p), *common],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=env,
            )
            for p in range(args.processes)
        ]
        sdk = ""
        for child in producers:
            assert child.stdout is not None
            word, _, sdk = child.stdout.readline().strip().partition(" ")
            assert word == "ready", "a producer did not start"
        load_before = os.getloadavg()
        server_cpu = cpu_seconds(proc.pid)
        start = time.perf_counter()
        for child in producers:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        results = []
        for child in producers:
            out, _ = child.communicate()
            results.append(json.loads(out.strip().splitlines()[-1]))
        elapsed = time.perf_counter() - start
        server_cpu = cpu_seconds(proc.pid) - server_cpu
        load_after = os.getloadavg()
        runs = [run for result in results for run in result["runs"]]
        requests = [tuple(r) for result in results for r in result["requests"]]
        lost = duplicated = not_finished = 0
        for run in runs:
            points, rows, distinct, status = read_back(url, str(run["id"]))
            lost += (args.rows - points) + (args.episodes - distinct)
            duplicated += rows - distinct
            not_finished += status != "completed"
    finally:
        proc.terminate()
        proc.wait(60)
    finishes = [float(run["finish_s"]) for run in runs]
    uploads = [seconds for what, status, seconds in requests if what != "other"]
    statuses: dict[int, int] = {}
    for _, status, _ in requests:
        statuses[status] = statuses.get(status, 0) + 1
    total = len(requests)
    print(
        f"{len(runs)} runs ({args.processes} processes x {args.runs}), {args.rows} rows + "
        f"{args.episodes} episodes each over {args.seconds:g} s; all done in {elapsed:.1f} s"
    )
    print(f"SDK {sdk}; server {server_process.SRC}")
    print(
        f"finish() p50 {pct(finishes, 0.5):.2f} s  p99 {pct(finishes, 0.99):.2f} s  "
        f"max {max(finishes):.2f} s"
    )
    print(
        f"uploads {len(uploads)}: latency p50 {pct(uploads, 0.5) * 1000:.0f} ms  "
        f"p99 {pct(uploads, 0.99) * 1000:.0f} ms  max {max(uploads) * 1000:.0f} ms"
    )
    print(
        f"requests {total}: 429 {statuses.get(429, 0)} ({100 * statuses.get(429, 0) / total:.1f} %)"
        f"  503 {statuses.get(503, 0)} ({100 * statuses.get(503, 0) / total:.1f} %)  "
        f"statuses {dict(sorted(statuses.items()))}"
    )
    stored = sum(count for status, count in statuses.items() if 200 <= status < 300)
    print(
        f"server CPU {server_cpu:.1f} s ({1000 * server_cpu / max(1, stored):.1f} ms per request "
        f"answered 2xx, {server_cpu / elapsed:.2f} cores on average); answered 2xx "
        f"{stored / elapsed:.1f}/s"
    )
    print(
        f"lost {lost}  duplicated {duplicated}  not finished {not_finished}  "
        f"SDK dropped {sum(int(r['dropped']) for r in runs)} failed "
        f"{sum(int(r['failed']) for r in runs)} spooled {sum(int(r['spooled']) for r in runs)}"
    )
    print(
        "load average before "
        + " ".join(f"{x:.2f}" for x in load_before)
        + ", after "
        + " ".join(f"{x:.2f}" for x in load_after)
    )


if __name__ == "__main__":
    main()
