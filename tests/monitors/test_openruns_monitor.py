"""The openruns monitor: a producer's metrics and trained episodes into its openruns run."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from openruns.monitors import Monitors, MonitorsConfig, OpenrunsMonitorConfig, run_links
from openruns.rundir import iter_stream, read_json

from .. import patience
from .helpers import episode

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _the_run(runs: Path):
    (run_dir,) = [p for p in runs.iterdir() if p.is_dir()]
    return run_dir, read_json(run_dir / "run.json")


def test_on_its_own_it_creates_the_run_forwards_the_trained_cohort_and_completes(tmp_path, caplog):
    config = MonitorsConfig(
        openruns=OpenrunsMonitorConfig(
            name="rl", model="m", mode="offline", dir=str(tmp_path / "runs")
        )
    )

    async def main():
        monitors = Monitors.from_config(config, producer="orchestrator", output_dir=tmp_path)
        await monitors.log({"loss": 0.5, "bad": float("nan")}, step=3)
        await monitors.log({"lag/p99": 0.01}, step=None)  # keyed by its time, not a step
        await monitors.log({"reward": 0.9}, step=3, kind="eval")  # apart from train metrics
        await monitors.log([episode(0)], step=3, kind="train", subset="all")
        await monitors.log([episode(1)], step=3, kind="train", subset="effective")
        await monitors.log([episode(2)], step=3, kind="eval", subset="effective")
        await monitors.log_annotations([{"episode_id": "ep-1", "step": 4}])
        await monitors.finalize()
        return monitors

    with caplog.at_level(logging.WARNING, logger="openruns.monitors"):
        monitors = asyncio.run(main())
    assert monitors.stats["openruns"].errors == []
    run_dir, doc = _the_run(tmp_path / "runs")
    assert (doc["status"], doc["name"], doc["kind"], doc["model"]) == (
        "completed",
        "rl",
        "train",
        "m",
    )
    assert [(r["step"], r["values"]) for r in iter_stream(run_dir, "metrics")] == [
        (3, {"loss": 0.5}),
        (None, {"lag/p99": 0.01}),
        (3, {"eval/reward": 0.9}),
    ]
    stored = list(iter_stream(run_dir, "episodes"))
    assert [(e["id"], e["kind"], e["subset"]) for e in stored] == [("ep-1", "train", "effective")]
    assert [
        (a["episode_id"], a["step"], a["producer"]) for a in iter_stream(run_dir, "annotations")
    ] == [("ep-1", 4, "orchestrator")]
    assert any("bad (nan)" in r.getMessage() for r in caplog.records)
    link = {"id": doc["id"], "url": run_dir.resolve().as_uri(), "kind": "train"}
    assert run_links(tmp_path, config) == {"openruns": link}


COMPONENT = """
import asyncio, sys
sys.path.insert(0, {tests!r})
from monitors.helpers import episode
from openruns.monitors import Monitors, MonitorsConfig, OpenrunsMonitorConfig, FileMonitorConfig

async def main():
    config = MonitorsConfig(file=FileMonitorConfig(), openruns=OpenrunsMonitorConfig())
    monitors = Monitors.from_config(config, producer="trainer", output_dir={out!r})
    await monitors.log({{"loss": 1.0}}, step=0)
    await monitors.log([episode(0), episode(1)], step=0)
    await monitors.finalize()

asyncio.run(main())
sys.exit(3)  # the owner, not the monitor, decides the run's status
"""


def test_under_a_launcher_it_attaches_and_only_flushes(tmp_path):
    code = COMPONENT.format(tests=str(Path(__file__).parents[1]), out=str(tmp_path / "out"))
    (tmp_path / "component.py").write_text(textwrap.dedent(code))
    proc = subprocess.run(
        [sys.executable, "-m", "openruns.cli", "run", "--mode", "offline", "--dir", "runs",
         "--", sys.executable, "component.py"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": SRC}, capture_output=True, text=True,
        timeout=patience.EXIT,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    run_dir, doc = _the_run(tmp_path / "runs")
    assert doc["error"] == "the command exited with code 3"
    assert [e["id"] for e in iter_stream(run_dir, "episodes")] == ["ep-0", "ep-1"]
    assert [r["values"] for r in iter_stream(run_dir, "metrics")] == [{"loss": 1.0}]
    # The component's own files sit beside the run.
    rows = (tmp_path / "out" / "monitors" / "file" / "episodes.index.jsonl").read_text()
    assert len(rows.splitlines()) == 2
