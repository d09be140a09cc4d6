"""A real server on loopback, and real processes that log into it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest

from .. import patience
from ..procs import default_signals

pytest.importorskip("fastapi", reason="the server extra is needed to serve the runs")

SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture
def server(tmp_path):
    from openruns.server import serve_in_thread

    handle = serve_in_thread(data_dir=tmp_path / "server-data", host="127.0.0.1", port=0)
    yield handle
    handle.stop()


@pytest.fixture
def api(server):
    with httpx.Client(base_url=server.url + "/api/v1", timeout=30) as client:
        yield client


def env_for(server: Any, tmp_path: Path, **extra: str) -> dict[str, str]:
    """What a process needs to log to `server`: the project importable, the server, a dir."""
    return {
        **os.environ,
        "PYTHONPATH": SRC,
        "OPENRUNS_BASE_URL": server.url,
        "OPENRUNS_DIR": str(tmp_path / "local"),
        **extra,
    }


def python(
    code: str, env: dict[str, str], cwd: Path, timeout: float = patience.EXIT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=default_signals,
    )


def cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`openruns ARGS` in a subprocess, to completion."""
    return subprocess.run(
        [sys.executable, "-m", "openruns.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=patience.EXIT,
        preexec_fn=default_signals,
    )
