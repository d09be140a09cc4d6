"""Helpers of the launcher tests: the real `openruns` CLI in a subprocess, and the run it owns."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from openruns.rundir import read_json

from .. import patience
from ..procs import default_signals, track

SRC = str(Path(__file__).resolve().parents[2] / "src")


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": SRC, "PYTHONUNBUFFERED": "1", **(extra or {})}


def openruns_cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = patience.EXIT
) -> subprocess.CompletedProcess[str]:
    """Run `openruns ARGS` (as `python -m openruns.cli`) to completion."""
    return subprocess.run(
        [sys.executable, "-m", "openruns.cli", *args],
        cwd=cwd,
        env=cli_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=default_signals,
    )


def spawn_cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "openruns.cli", *args],
        cwd=cwd,
        env=cli_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,
    )
    return track(proc)


def script(tmp_path: Path, name: str, code: str) -> str:
    """Write a Python script and return its path."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(code))
    return str(path)


def the_run(runs: Path) -> tuple[Path, dict[str, Any]]:
    """The one run directory under `runs` and its run.json."""
    dirs = [p for p in runs.iterdir() if p.is_dir()]
    assert len(dirs) == 1, dirs
    doc = read_json(dirs[0] / "run.json")
    assert doc is not None
    return dirs[0], doc


def wait_for(path: Path, timeout: float = patience.START) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)
