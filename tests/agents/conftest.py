"""
Answers for scripts and agents (issue 22): a real server on each store configuration with one
seeded run (metrics by step and by time, episodes with text to search, console lines, a
config), read back by the CLI with --json and by `openruns mcp` through a real MCP client.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from openruns.server import ServerHandle, serve_in_thread

from .. import patience
from ..server.helpers import api, create_run, metric_rows, ndjson, upload
from ..services import BACKENDS, Stores

CONFIG = {"format": "toml", "text": "lr = 1e-5\nbatch = 8\n", "filename": "rl.toml"}
LONG = "the sandbox timed out " * 400  # 8,800 characters: an answer an agent gets cut


@dataclass
class Seeded:
    server: ServerHandle
    stores: Stores
    run_id: str  # the seeded run
    other_id: str  # an older eval run with 25 metric keys
    episodes: list[dict[str, Any]]


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def seeded(backend, stores_factory, tmp_path_factory) -> Iterator[Seeded]:
    stores = stores_factory.new(backend, tmp_path_factory.mktemp("agents-data"))
    server = serve_in_thread(**stores.settings)
    with api(server.url) as http:
        other = create_run(http, kind="eval", name="baseline-eval", tags=["agents"])
        wide = {f"eval/k{k:02d}": float(k) for k in range(25)}
        upload(http, other["id"], "metrics", metric_rows(range(3), **wide))
        run = create_run(
            http, name="rl-agents", model="Qwen/Qwen3-8B", tags=["agents"], config=CONFIG
        )
        rid = run["id"]
        upload(http, rid, "metrics", metric_rows(range(100), loss=lambda s: 1.0 / (s + 1)))
        upload(http, rid, "metrics", metric_rows(range(0, 100, 10), reward=lambda s: s / 100))
        upload(http, rid, "metrics", b'{"ts": 1000000000.5, "values": {"queue": 3}}\n')
        records = [_episode(i) for i in range(30)]
        upload(http, rid, "episodes", ndjson(records))
        lines = [
            {"ts": 1.0e9 + i, "stream": "stderr" if i == 4 else "stdout", "line": f"line {i}"}
            for i in range(5)
        ]
        upload(http, rid, "logs", ndjson(lines))
        summary = {"reward": 0.9, "loss": 0.01}
        assert http.patch(f"/runs/{rid}", json={"summary": summary}).status_code == 200
        _wait_indexed(http, rid)
    yield Seeded(server, stores, rid, other["id"], records)
    server.stop()


def _episode(i: int) -> dict[str, Any]:
    text = LONG if i == 7 else f"answer {i}: fine"
    nodes = [
        {"message": {"role": "user", "content": f"question {i}"}},
        {"message": {"role": "assistant", "content": text}, "sampled": True},
    ]
    return {
        "id": f"ep-{i}",
        "run": {"type": "train", "work": {"type": "train", "step": i // 10}},
        "env": "code" if i % 2 else "math",
        "traces": [{"reward": i / 30, "nodes": nodes}],
    }


def _wait_indexed(http: httpx.Client, run_id: str) -> None:
    """Until the search index has every record of the run (it is built behind ingest)."""
    deadline = time.monotonic() + patience.SETTLE
    while time.monotonic() < deadline:
        body = http.get(f"/runs/{run_id}/search", params={"q": "anything"}).json()
        if body["pending"] == 0:
            return
        time.sleep(0.1)
    raise AssertionError("the search index did not catch up")
