"""Helpers shared by the SDK tests."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from openruns.rundir import iter_stream, read_json

from .. import patience
from ..procs import default_signals, track

SRC = str(Path(__file__).resolve().parents[2] / "src")


def run_json(run_dir: Path) -> dict[str, Any]:
    doc = read_json(run_dir / "run.json")
    assert doc is not None, f"no run.json in {run_dir}"
    return doc


def records(run_dir: Path, stream: str) -> list[dict[str, Any]]:
    return list(iter_stream(run_dir, stream))


def only_run_dir(base: Path) -> Path:
    dirs = [p for p in base.iterdir() if p.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


def python(
    code: str,
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout: float = patience.EXIT,
    argv: list[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `code` (with `argv` as sys.argv[1:]) in a fresh interpreter with the project's
    openruns importable."""
    full_env = {**os.environ, "PYTHONPATH": SRC, **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *(argv or [])],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=default_signals,
    )


def spawn(code: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    full_env = {**os.environ, "PYTHONPATH": SRC, **(env or {})}
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,
    )
    return track(proc)
