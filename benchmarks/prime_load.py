"""
The prime-runs SDK (0.1.4, unmodified) uploading production-sized episodes into openruns, next
to openruns' own SDK, on the same server and into the same run.

    uv run python benchmarks/prime_load.py --episodes 60      # ~500 MB of JSON per SDK

A local `openruns server` process gets one training run. Then, one after the other, each SDK
runs in its own process and logs the same episodes (benchmarks/episodes.py: lognormal sizes,
median 6.4 MB) into that run, attached with `id=`: openruns' SDK first (its attach leaves the
run open), prime-runs second (through Prime Traces: PRIME_API_BASE_URL, PRIME_TRACES_URL and
PRIME_API_KEY point at the server; its finish completes the run). For each: MB/s of episode
JSON and episodes/s from the first log call to the end of finish(), the server's CPU-seconds
per GB of JSON over that phase (utime + stime of the server process from /proc), what reached
the server, and what the SDK reported lost.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import server_process  # noqa: E402

_CLOCK = os.sysconf("SC_CLK_TCK")

# Each SDK's process: build the same episodes, log them one call per episode, finish, report.
_PRODUCER = """
import json, sys, time
sys.path.insert(0, {here!r})
from episodes import EpisodeFactory
factory = EpisodeFactory(seed=7)
sizes = factory.sizes({episodes})
episodes = [factory.episode(i, s, step=i // 8) for i, s in enumerate(sizes)]
{open_run}
start = time.perf_counter()
for episode in episodes:
    run.log_episodes([episode])
run.finish()
seconds = time.perf_counter() - start
print(json.dumps({{
    "seconds": seconds,
    "errors": list(run.errors),
    "failed": dict(run.failed_records),
    "dropped": run.dropped_records,
}}))
"""
_OPENRUNS = "import openruns\nrun = openruns.init(id={run_id!r}, base_url={url!r})"
_PRIME = "import prime_runs as pr\nrun = pr.init(kind='train', id={run_id!r})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=60)
    args = parser.parse_args()
    from episodes import EpisodeFactory

    factory = EpisodeFactory(seed=7)
    sizes = factory.sizes(args.episodes)
    # Both SDKs send compact JSON; orjson's is byte for byte the same size.
    json_bytes = sum(
        len(orjson.dumps(factory.episode(i, s, step=i // 8))) for i, s in enumerate(sizes)
    )
    with tempfile.TemporaryDirectory(prefix="prime-load-") as tmp:
        server, url = _start_server(Path(tmp) / "data")
        try:
            run_id = httpx.post(f"{url}/api/v1/runs", json={"kind": "train", "name": "load"})
            run_id = run_id.json()["id"]
            results = {}
            for sdk, open_run, env in (
                ("openruns", _OPENRUNS, {}),
                (
                    "prime-runs",
                    _PRIME,
                    {"PRIME_API_BASE_URL": url, "PRIME_TRACES_URL": url, "PRIME_API_KEY": "k"},
                ),
            ):
                before = _cpu_seconds(server.pid)
                report = _produce(
                    open_run.format(run_id=run_id, url=url), args.episodes, env, Path(tmp) / sdk
                )
                report["server_cpu"] = _cpu_seconds(server.pid) - before
                report["stored"] = _stored(url, run_id)
                results[sdk] = report
            status = httpx.get(f"{url}/api/v1/runs/{run_id}").json()["status"]
        finally:
            server.terminate()
            server.wait(30)
    print(f"episodes per SDK: {args.episodes}, {json_bytes / 1e6:.0f} MB of JSON; run {status}")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("| SDK | MB/s | episodes/s | server CPU-s per GB | stored (cumulative) | lost |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for sdk, r in results.items():
        lost = "none" if not (r["errors"] or r["failed"] or r["dropped"]) else json.dumps(r)
        print(
            f"| {sdk} | {json_bytes / 1e6 / r['seconds']:.1f} | "
            f"{args.episodes / r['seconds']:.2f} | {r['server_cpu'] / (json_bytes / 1e9):.1f} | "
            f"{r['stored']} | {lost} |"
        )


def _start_server(data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    args = ["--data-dir", str(data_dir), "--rate-limit", "0"]
    return server_process.start_server(args, data_dir.with_suffix(".log"))


def _produce(open_run: str, episodes: int, env: dict[str, str], home: Path) -> dict:
    home.mkdir()
    script = _PRODUCER.format(here=str(HERE), episodes=episodes, open_run=open_run)
    environ = {"PATH": os.environ["PATH"], "HOME": str(home), **env}
    proc = subprocess.run(
        [sys.executable, "-c", script], env=environ, cwd=home, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK  # utime, stime


def _stored(url: str, run_id: str) -> int:
    steps = httpx.get(f"{url}/api/v1/runs/{run_id}/steps", timeout=60).json()
    return sum(s["count"] for s in steps)


if __name__ == "__main__":
    main()
