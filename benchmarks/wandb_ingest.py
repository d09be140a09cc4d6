"""
The W&B SDK (wandb 0.31.0, unmodified) logging into openruns, next to the same script with
WANDB_MODE=offline and to openruns' own SDK, on one machine (issue 19).

    uv run python benchmarks/wandb_ingest.py                    # 100,000 steps: minutes
    uv run python benchmarks/wandb_ingest.py --steps 10000      # a quick look

Each producer runs in its own process and logs 20 scalars a step for `--steps` steps, and
1,000 rollouts: W&B as ten TRL-shaped `completions` tables of 100 rows (step, prompt,
completion, two reward functions, advantage: trl/trainer/grpo_trainer.py), openruns' SDK as
the same rows through log_episodes (with its default queue, and with one long enough to hold
every row of the tight loop). Measured per producer: the cost of one log call on the
caller (p50, p99, mean), the wall time from the first log call to the end of finish(), the
rows per second that took (offline: written to disk), what reached the server (metric points of
one key, episodes), and the server's CPU-seconds per million rows over the phase (utime +
stime of the server process, from /proc). The load average is printed with the results: a
figure of a loaded machine says so.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import server_process  # noqa: E402

_CLOCK = os.sysconf("SC_CLK_TCK")
SCALARS = 20
ROLLOUTS = 1000
TABLES = 10

# Shared by every producer: the values of step i, the rows of table t, timing of the calls.
_COMMON = """
import json, os, statistics, sys, time
STEPS, SCALARS, ROLLOUTS, TABLES = {steps}, {scalars}, {rollouts}, {tables}
PER_TABLE = ROLLOUTS // TABLES
EVERY = max(1, STEPS // TABLES)
NAMES = [f"train/metric_{{k:02d}}" for k in range(SCALARS)]

def values(step):
    return {{name: step * 0.001 + k for k, name in enumerate(NAMES)}}

def rows(table):
    step = table * EVERY
    return [
        [step, f"Question {{table}}.{{i}}: what is {{i}} + {{i}}?", f"The answer is {{2 * i}}.",
         1.0 if i % 3 else 0.0, 0.5, 0.25 if i % 3 else -0.5]
        for i in range(PER_TABLE)
    ]

COLUMNS = ["step", "prompt", "completion", "accuracy_reward", "format_reward", "advantage"]
costs = []

def timed(call, *args, **kwargs):
    start = time.perf_counter()
    call(*args, **kwargs)
    costs.append(time.perf_counter() - start)

def report(seconds, lost=None):
    costs.sort()
    print(json.dumps({{
        "seconds": seconds,
        "lost": lost,
        "p50_us": costs[len(costs) // 2] * 1e6,
        "p99_us": costs[int(len(costs) * 0.99)] * 1e6,
        "mean_us": statistics.fmean(costs) * 1e6,
        "calls": len(costs),
    }}))
"""

_WANDB = """
import wandb
run = wandb.init(project="bench", name="{name}")
start = time.perf_counter()
table = 0
for step in range(STEPS):
    timed(run.log, values(step), step=step)
    if step % EVERY == 0 and table < TABLES:
        timed(run.log, {{"completions": wandb.Table(columns=COLUMNS, data=rows(table))}}, step=step)
        table += 1
run.finish()
report(time.perf_counter() - start)  # the W&B SDK has no loss counters
"""

_OPENRUNS = """
import openruns
run = openruns.init(kind="train", name="{name}", base_url=os.environ["URL"],
                    system_metrics_interval=0, capture_console=False)
start = time.perf_counter()
table = 0
for step in range(STEPS):
    timed(run.log_metrics, values(step), step=step)
    if step % EVERY == 0 and table < TABLES:
        episodes = [dict(zip(COLUMNS, row)) | {{"reward": row[3] + row[4]}} for row in rows(table)]
        timed(run.log_episodes, episodes, step=step)
        table += 1
run.finish()
seconds = time.perf_counter() - start
report(seconds, {{"dropped": run.dropped_records, "failed": run.failed_records}})
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100_000)
    args = parser.parse_args()
    common = _COMMON.format(steps=args.steps, scalars=SCALARS, rollouts=ROLLOUTS, tables=TABLES)
    results = {}
    with tempfile.TemporaryDirectory(prefix="wandb-ingest-") as tmp:
        data = Path(tmp) / "data"
        server, url = server_process.start_server(
            ["--data-dir", str(data), "--rate-limit", "0"], data.with_suffix(".log")
        )
        try:
            for label, script, env in (
                ("wandb → openruns", _WANDB, {"WANDB_BASE_URL": url}),
                ("wandb, WANDB_MODE=offline", _WANDB, {"WANDB_MODE": "offline"}),
                ("openruns SDK → openruns", _OPENRUNS, {"URL": url}),
                # The same with room to queue every row: its default queue (65,536 records) is
                # shorter than a tight loop of 100,000 calls on a loaded machine needs.
                (
                    "openruns SDK, max_queued_records=200,000",
                    _OPENRUNS,
                    {"URL": url, "OPENRUNS_MAX_QUEUED_RECORDS": "200000"},
                ),
            ):
                name = f"bench-{len(results)}"
                before = _cpu_seconds(server.pid)
                home = Path(tmp) / name
                report = _produce(common + script.format(name=name), home, env)
                if "offline" not in label:
                    report["stored"] = _stored(url, name, args.steps)
                    report["server_cpu"] = _cpu_seconds(server.pid) - before
                results[label] = report
        finally:
            server.terminate()
            server.wait(30)
    rows = args.steps + ROLLOUTS
    print(f"{args.steps:,} steps x {SCALARS} scalars and {ROLLOUTS:,} rollouts ({rows:,} rows)")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        "| producer | log() p50 / p99 / mean (µs) | first log to finish() | rows/s "
        "| stored (points of a key, episodes) | lost (the SDK's count) | server CPU-s per M rows |"
    )
    print("| --- | ---: | ---: | ---: | --- | --- | ---: |")
    for label, r in results.items():
        stored = r.get("stored")
        cpu = r.get("server_cpu")
        print(
            f"| {label} | {r['p50_us']:.1f} / {r['p99_us']:.1f} / {r['mean_us']:.1f} "
            f"| {r['seconds']:.1f} s | {rows / r['seconds']:,.0f} "
            f"| {'written offline' if stored is None else f'{stored[0]:,}, {stored[1]:,}'} "
            f"| {'not counted' if r['lost'] is None else json.dumps(r['lost'])} "
            f"| {'—' if cpu is None else f'{cpu / (rows / 1e6):.1f}'} |"
        )


def _produce(script: str, home: Path, env: dict[str, str]) -> dict:
    home.mkdir()
    environ = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "WANDB_API_KEY": "0" * 40,
        "WANDB_DIR": str(home),
        "WANDB_SILENT": "true",
        "WANDB_DISABLE_GIT": "true",
        "WANDB_DISABLE_CODE": "true",
        "PYTHONPATH": server_process.SRC,
        **env,
    }
    proc = subprocess.run(
        [sys.executable, "-c", script], env=environ, cwd=home, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-4000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK  # utime, stime


def _stored(url: str, name: str, steps: int, wait: float = 120.0) -> tuple[int, int]:
    """(points of the first metric, episodes) of the run named `name`, once both are complete
    or after `wait` seconds (finish() has returned; the server may still be writing)."""
    deadline = time.monotonic() + wait
    with httpx.Client(base_url=f"{url}/api/v1", timeout=60) as client:
        while True:
            runs = client.get("/runs", params={"name": name}).json()
            (run,) = [r for r in runs["items"] if r["name"] == name]
            series = client.get(
                f"/runs/{run['id']}/metrics", params={"keys": "train/metric_00", "max_points": 0}
            ).json()["series"]
            points = len(series.get("train/metric_00", {}).get("step", []))
            episodes = sum(s["count"] for s in client.get(f"/runs/{run['id']}/steps").json())
            if (points >= steps and episodes >= ROLLOUTS) or time.monotonic() > deadline:
                return points, episodes
            time.sleep(0.5)


if __name__ == "__main__":
    main()
