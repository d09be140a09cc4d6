"""
The alert evaluator's CPU at 1,000 active runs (issue 22).

1. open a server's state on a fresh store (SQLite in a temporary directory, or
   `--database-url` for PostgreSQL) and make RUNS running runs, and the rules a team would
   have: failed or crashed, silent for 30 minutes, a NaN of any metric, `loss` above a
   threshold over its last 20 points, and an episode error rate above 20 %;
2. per round, give CHANGED of the runs new data the way ingest does (a metric upload of 10
   steps of 5 keys each, through the store's own ingest), then time one evaluation round
   (`evaluate_round`: claim what changed, read it, check every rule) in CPU seconds of this
   process (every thread: the store's threads do the SQL) and wall time;
3. print per configuration the median round and its share of one core at the default
   interval (10 s): CPU of a round / 10 s.

Nothing fires (loss stays below the threshold), so the figure is the checking, not the
delivering. Rounds alternate between all runs changed (every active run logged in the last
interval, the worst case) and a tenth of them.

    uv run python benchmarks/alerts_eval.py                  # 1,000 runs, 10 rounds each
    uv run python benchmarks/alerts_eval.py --runs 200 --rounds 3

Results go in docs/benchmarks.md, section "Alerts: the evaluator".
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from openruns.server.alerts.evaluator import evaluate_round
from openruns.server.config import ServerSettings
from openruns.server.state import ServerState
from openruns.server.store import alerts
from openruns.server.store.metrics import MetricPoints

INTERVAL = 10.0  # ServerSettings.alert_interval's default
KEYS = ("loss", "reward", "entropy", "grad_norm", "lr")
STEPS_PER_UPLOAD = 10
RULES = (
    {"type": "failed", "statuses": ["failed", "crashed"]},
    {"type": "silent", "minutes": 30.0},
    {"type": "nonfinite", "metric": "*"},
    {
        "type": "threshold",
        "metric": "loss",
        "op": "above",
        "value": 100.0,
        "stat": "mean",
        "window_points": 20,
        "window_minutes": None,
    },
    {"type": "error_rate", "above": 0.2, "window_episodes": 100, "min_episodes": 10},
)


async def main(args: argparse.Namespace, data_dir: Path) -> None:
    fields = {"data_dir": data_dir}
    if args.database_url:
        fields["database_url"] = args.database_url
    state = ServerState.open(ServerSettings(**fields))  # type: ignore[arg-type]
    store = state.store
    try:
        for condition in RULES:
            rule = {
                "team_id": "default",
                "project": None,
                "name": condition["type"],
                "condition": condition,
                "url": "http://127.0.0.1:9/hook",
                "format": "generic",
                "secret": "s",
                "enabled": True,
            }
            await store.write(alerts.create_rule, rule, time.time())
        seqs = []
        for i in range(args.runs):
            run, _ = await store.create_run(
                "default", {"id": f"bench-{i}", "kind": "train", "name": f"r{i}"}, None
            )
            seqs.append(run["seq"])
        step = 0
        for seq in seqs:  # every run has a history to read
            await _upload(store, seq, step)
        await evaluate_round(state)
        print(f"{args.runs} running runs, {len(RULES)} rules; load {_load()}")
        print("changed | round CPU s | round wall s | CPU share at 10 s interval")
        results: dict[int, list[tuple[float, float]]] = {}
        for r in range(args.rounds * 2):
            changed = seqs if r % 2 == 0 else seqs[::10]
            step += STEPS_PER_UPLOAD
            for seq in changed:
                await _upload(store, seq, step)
            cpu, wall = time.process_time(), time.perf_counter()
            queued = await evaluate_round(state)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            assert queued == 0
            results.setdefault(len(changed), []).append((cpu, wall))
        for count, rounds in sorted(results.items()):
            cpu = statistics.median(c for c, _ in rounds)
            wall = statistics.median(w for _, w in rounds)
            print(f"{count:7d} | {cpu:11.3f} | {wall:12.3f} | {cpu / INTERVAL:7.1%}")
        print(f"load after: {_load()}")
    finally:
        state.close()


async def _upload(store, seq: int, step: int) -> None:  # type: ignore[no-untyped-def]
    points = MetricPoints()
    now = time.time()
    for s in range(step, step + STEPS_PER_UPLOAD):
        for k, key in enumerate(KEYS):
            points[(key, s)] = (float(k + s % 7), now)
    await store.ingest_metrics(seq, f"bench-{seq}-{step}", points, STEPS_PER_UPLOAD)


def _load() -> str:
    return (
        " ".join(Path("/proc/loadavg").read_text().split()[:3])
        if os.path.exists("/proc/loadavg")
        else "n/a"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each configuration")
    parser.add_argument("--database-url", help="PostgreSQL (default: SQLite in a temp dir)")
    parsed = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(main(parsed, Path(tmp)))
