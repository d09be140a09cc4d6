"""Running a script of the real wandb SDK as a user would, against an openruns server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
API_KEY = "0" * 40  # any key on loopback without auth: the SDK wants 40 characters


def run_wandb(script: Path, tmp_path: Path, base_url: str, **env: str) -> dict[str, Any]:
    """Run `script` in a process whose environment has only what a user sets to point the W&B
    SDK at openruns (WANDB_BASE_URL, WANDB_API_KEY), a temporary HOME and WANDB_DIR, W&B's
    switches that keep it quiet and off git, and `env` (OUT: a directory for the script); the
    JSON report the script printed last. It must exit 0 within three minutes."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    environ = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "PYTHONPATH": str(ROOT),
        "WANDB_BASE_URL": base_url,
        "WANDB_API_KEY": API_KEY,
        "WANDB_DIR": str(tmp_path),
        "WANDB_SILENT": "true",
        "WANDB_DISABLE_GIT": "true",
        "WANDB_DISABLE_CODE": "true",
        "HF_HUB_OFFLINE": "1",
        "OUT": str(tmp_path / "out"),
        **env,
    }
    proc = subprocess.run(
        [sys.executable, str(script)],
        env=environ,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, (
        f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])
