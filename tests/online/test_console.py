"""Console output of real processes reaching a real server on loopback: a failed script's
prints and traceback (read back with Client.logs and the HTTP route), an offline run's lines
delivered by `openruns sync`, and a flood of output bounded with the loss counted and said."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import orjson
import pytest

from openruns.api import Client

from ..procs import default_signals
from .conftest import SRC, get

CAPTURE_ON = {"OPENRUNS_CAPTURE_CONSOLE": "1"}


def run_script(code: str, cwd: Path, env: dict[str, str], stdout: int | None = None) -> str:
    """Run `code` in a fresh interpreter; returns its stderr (asserted on by the caller)."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": SRC, **CAPTURE_ON, **env},
        stdout=subprocess.PIPE if stdout is None else stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        preexec_fn=default_signals,
    )
    return f"exit {done.returncode}\n{done.stderr}"


FAILING = """
import sys
import openruns
run = openruns.init(kind="train", name="failing")
print(run.id, file=open("run_id", "w"))
print("step 1: loss 0.5")
print("loading shard 3", file=sys.stderr)
def train():
    raise FloatingPointError("loss is NaN")
with run:
    train()
"""

UNCAUGHT = """
import openruns
run = openruns.init(kind="train", name="uncaught")
print(run.id, file=open("run_id", "w"))
print("about to fail")
raise KeyError("missing shard")
"""


@pytest.mark.parametrize(
    ("code", "status", "printed", "error"),
    [
        (FAILING, "failed", "step 1: loss 0.5", "FloatingPointError: loss is NaN"),
        (UNCAUGHT, "crashed", "about to fail", "KeyError: 'missing shard'"),
    ],
    ids=["with-block", "uncaught"],
)
def test_a_failed_scripts_prints_and_traceback_reach_the_server(
    server, tmp_path, code, status, printed, error
):
    outcome = run_script(code, tmp_path, {"OPENRUNS_BASE_URL": server.url})
    assert outcome.startswith("exit 1\n"), outcome
    run_id = (tmp_path / "run_id").read_text().strip()
    assert get(server.url, f"/runs/{run_id}")["status"] == status

    with Client(base_url=server.url) as client:
        lines = list(client.logs(run_id))
        assert printed in [
            x["line"] for x in lines if (x["stream"], x["source"]) == ("stdout", "main")
        ]
        tracebacks = [x["line"] for x in lines if x["stream"] == "traceback"]
        assert len(tracebacks) == 1
        assert tracebacks[0].startswith("Traceback (most recent call last):")
        assert tracebacks[0].endswith(error)
        # Python's own printout of the uncaught one went through the tee of stderr as well.
        stderr = " ".join(x["line"] for x in lines if x["stream"] == "stderr")
        assert ("loading shard 3" in stderr) if code is FAILING else (error in stderr)
        # Filters and the tail, as the client passes them to the route.
        assert [x["line"] for x in client.logs(run_id, stream="traceback")] == tracebacks
        assert list(client.logs(run_id, tail=1)) == lines[-1:]
        assert list(client.logs(run_id, after=lines[0]["offset"])) == lines[1:]
        totals = client.log_totals(run_id)
        assert totals["lines"] == len(lines) and totals["dropped_lines"] == 0

    # The same lines on the HTTP route the dashboard's Logs tab reads.
    page = httpx.get(f"{server.url}/api/v1/runs/{run_id}/logs", timeout=30).json()
    assert [x["line"] for x in page["items"]] == [x["line"] for x in lines]


OFFLINE = """
import openruns
run = openruns.init(kind="eval", mode="offline", dir="runs")
print(run.id, file=open("run_id", "w"))
for i in range(3):
    print(f"sample {i}: ok")
run.finish()
"""


def test_an_offline_runs_console_lines_are_delivered_by_sync(server, tmp_path):
    outcome = run_script(OFFLINE, tmp_path, {})
    assert outcome.startswith("exit 0\n"), outcome
    run_id = (tmp_path / "run_id").read_text().strip()
    assert (tmp_path / "runs" / run_id / "logs").is_dir()  # kept in the run directory

    synced = subprocess.run(
        [sys.executable, "-m", "openruns.cli", "sync", "runs"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": SRC, "OPENRUNS_BASE_URL": server.url},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert synced.returncode == 0, synced.stderr
    with Client(base_url=server.url) as client:
        lines = [(x["stream"], x["source"], x["line"]) for x in client.logs(run_id)]
    printed = [line for line in lines if line[0] == "stdout"]
    assert printed == [("stdout", "main", f"sample {i}: ok") for i in range(3)], lines
    assert get(server.url, f"/runs/{run_id}")["status"] == "completed", synced.stdout


FLOOD = """
import openruns
run = openruns.init(kind="train", name="flood")
print(run.id, file=open("run_id", "w"))
for i in range(1000):
    print("x" * 10000)  # 10 MB in well under the second the capture waits before it reads
    if i % 10 == 0:
        run.log_metrics({"i": i}, step=i // 10)
run.finish()
print(run.dropped_console_chars, run.dropped_records, file=open("losses", "w"))
"""


def test_a_flood_of_output_is_bounded_and_the_loss_counted_and_said(server, tmp_path):
    with open(tmp_path / "stdout", "w") as out:  # a file: the flood is not slowed by a reader
        outcome = run_script(
            FLOOD, tmp_path, {"OPENRUNS_BASE_URL": server.url}, stdout=out.fileno()
        )
    assert outcome.startswith("exit 0\n"), outcome
    assert "characters of console output" in outcome  # the warning at finish
    run_id = (tmp_path / "run_id").read_text().strip()
    dropped, dropped_records = map(int, (tmp_path / "losses").read_text().split())
    # The terminal (here a file) still got every character.
    assert (tmp_path / "stdout").stat().st_size == 1000 * 10001

    printed = 1000 * 10000  # characters of text; plus 1000 newlines
    assert 0 < dropped < printed
    doc = get(server.url, f"/runs/{run_id}")
    assert doc["losses"]["dropped_console_chars"] == dropped
    # The flood took no room from metric rows: every one arrived.
    assert dropped_records == 0 and doc["losses"]["dropped_records"] == 0
    assert len(get(server.url, f"/runs/{run_id}/metrics", keys="i")["series"]["i"]["step"]) == 100

    with Client(base_url=server.url) as client:
        lines = list(client.logs(run_id))
    kept = sum(len(x["line"]) for x in lines if x["stream"] == "stdout")
    # Each character printed is kept or counted as dropped: the kept text plus the dropped
    # count is the text printed, plus the newlines among the dropped characters.
    assert printed <= kept + dropped <= printed + 1000
    notes = [x["line"] for x in lines if x["stream"] == "stderr" and "[openruns:" in x["line"]]
    assert notes == [
        f"[openruns: {dropped} characters of console output were not kept: more was printed "
        "than could wait to be sent]"
    ]


def test_the_client_pages_forwards_and_backwards_through_a_runs_lines(server, monkeypatch):
    from openruns.api import _client

    monkeypatch.setattr(_client, "_LOGS_PAGE", 3)  # several pages out of a few lines
    run = httpx.post(f"{server.url}/api/v1/runs", json={"kind": "eval"}, timeout=30).json()
    body = b"".join(
        orjson.dumps({"ts": 1.0, "stream": "stderr" if i % 4 == 0 else "stdout", "line": f"l{i}"})
        + b"\n"
        for i in range(10)
    )
    posted = httpx.post(f"{server.url}/api/v1/runs/{run['id']}/logs", content=body, timeout=30)
    assert posted.status_code == 200, posted.text
    with Client(base_url=server.url) as client:
        every = list(client.logs(run["id"]))
        assert [x["line"] for x in every] == [f"l{i}" for i in range(10)]
        assert [x["line"] for x in client.logs(run["id"], tail=7)] == [
            f"l{i}" for i in range(3, 10)
        ]
        assert [x["line"] for x in client.logs(run["id"], tail=50)] == [f"l{i}" for i in range(10)]
        assert [x["line"] for x in client.logs(run["id"], after=every[5]["offset"])] == [
            f"l{i}" for i in range(6, 10)
        ]
        assert [x["line"] for x in client.logs(run["id"], stream="stderr", tail=2)] == ["l4", "l8"]
        assert client.log_totals(run["id"])["lines"] == 10
        with pytest.raises(ValueError, match="tail must be a positive number of lines"):
            client.logs(run["id"], tail=0)
