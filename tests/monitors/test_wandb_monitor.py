"""The W&B monitor in W&B's offline mode: one W&B run id for every component of a launch."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from openruns.rundir import read_json

pytest.importorskip("wandb")

SRC = str(Path(__file__).resolve().parents[2] / "src")

COMPONENT = """
import asyncio
from openruns.monitors import Monitors, MonitorsConfig

async def main():
    monitors = Monitors.from_config(MonitorsConfig.from_env(), output_dir="out")
    for step in range(3):
        await monitors.log({"loss": 1.0 / (step + 1), "nested": {"x": step}}, step=step)
        await monitors.log({"inference/queue": step, "lag": 0.01}, step=None)  # keyed by time
    await monitors.finalize()
    stats = monitors.stats.values()
    assert not any(s.errors or s.dropped or s.failed for s in stats), monitors.stats

asyncio.run(main())
"""


def test_components_of_a_launch_log_to_one_wandb_run(tmp_path):
    (tmp_path / "component.py").write_text(textwrap.dedent(COMPONENT))
    (tmp_path / "job.toml").write_text(
        textwrap.dedent(
            f"""
            [run]
            mode = "offline"
            dir = "runs"

            [monitors.wandb]
            project = "openruns-test"

            [[component]]
            name = "trainer"
            command = ["{sys.executable}", "component.py"]

            [[component]]
            name = "orchestrator"
            command = ["{sys.executable}", "component.py"]
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": SRC, "WANDB_MODE": "offline",
           "WANDB_DIR": str(tmp_path / "wandb-home"), "WANDB_SILENT": "true"}  # fmt: skip
    env.pop("WANDB_RUN_ID", None)
    proc = subprocess.run(
        [sys.executable, "-m", "openruns.cli", "launch", "job.toml"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=110,
    )  # fmt: skip
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    logs = {p.name: p.read_text() for p in (tmp_path / "logs" / run_dir.name).iterdir()}
    assert proc.returncode == 0, (proc.stderr, logs)
    assert read_json(run_dir / "run.json")["status"] == "completed"
    for producer in ("trainer", "orchestrator"):
        base = tmp_path / "out" / "monitors" / "wandb" / producer / "wandb"
        (offline,) = base.glob("offline-run-*")
        assert offline.name.endswith(f"-{run_dir.name}")  # the W&B id is the openruns run id
        assert (offline / f"run-{run_dir.name}.wandb").stat().st_size > 0
    link = read_json(tmp_path / "out" / "monitors" / "wandb" / "run.json")
    assert link["id"] == run_dir.name  # the link record names the W&B run
