"""Real openruns servers on loopback: in a thread, or as a process that can be SIGKILLed."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from openruns.server import serve_in_thread
from openruns.sync import sync_run
from openruns.wire import WireClient

from .. import patience
from ..services import free_port

SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture
def server(tmp_path):
    handle = serve_in_thread(data_dir=tmp_path / "server-data", host="127.0.0.1", port=0)
    yield handle
    handle.stop()


class ServerProcess:
    """`openruns server` as a child process, to be killed and restarted on the same data."""

    def __init__(self, data_dir: Path, port: int, *extra: str):
        self.data_dir = data_dir
        self.port = port
        self.extra = extra
        self.proc: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServerProcess:
        args = [sys.executable, "-m", "openruns.cli", "server", "--port", str(self.port)]
        args += ["--data-dir", str(self.data_dir), *self.extra]
        self.proc = subprocess.Popen(
            args,
            env={**os.environ, "PYTHONPATH": SRC},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + patience.START
        printed: list[str] = []
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            printed.append(line)
            if re.search(r"listening on http://", line):
                # The server logs every request (its access log): read the pipe to the end,
                # or a full pipe would stall the server mid-test.
                threading.Thread(target=_discard, args=(self.proc.stdout,), daemon=True).start()
                return self
            if not line and self.proc.poll() is not None:
                break
        said = "".join(printed[-20:]).strip()
        raise RuntimeError(f"openruns server did not start (exit {self.proc.poll()}): {said}")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.proc.stdout.close()

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc.stdout.close()


def _discard(stream) -> None:
    for _ in stream:
        pass


@pytest.fixture
def server_process(tmp_path):
    started: list[ServerProcess] = []

    def make(*extra: str, port: int | None = None) -> ServerProcess:
        proc = ServerProcess(tmp_path / "server-data", port or free_port(), *extra)
        started.append(proc)
        return proc

    yield make
    for proc in started:
        proc.stop()


def get(url: str, path: str, **params):
    response = httpx.get(url + "/api/v1" + path, params=params, timeout=30)
    response.raise_for_status()
    return response.json()


def all_episodes(url: str, run_id: str, stream: str = "episodes") -> list[dict]:
    items, cursor = [], None
    while True:
        params = {"stream": stream, "limit": 500}
        if cursor:
            params["cursor"] = cursor
        page = get(url, f"/runs/{run_id}/episodes", **params)
        items += page["items"]
        cursor = page.get("next_cursor")
        if not cursor:
            return items


def metric_points(url: str, run_id: str, key: str) -> list[tuple[int, float]]:
    series = get(url, f"/runs/{run_id}/metrics", keys=key, max_points=0)["series"][key]
    return list(zip(series["step"], series["value"], strict=True))


def episode(i: int) -> dict:
    return {"id": f"ep-{i}", "env": "math", "traces": [{"reward": 1.0, "text": "x" * 2000}]}


def synced(url: str, run_dir) -> None:
    """`openruns sync` of one run directory, which must deliver everything it has."""
    wire = WireClient(url, None)
    try:
        result = sync_run(wire, run_dir)
    finally:
        wire.close()
    assert (result.errors, result.rejected) == ([], 0), result.errors
