"""
A run failing with a 100,000-character exception fails with it, cut (issue 25, row 6).

Before the fix the SDK cut the traceback to 65,546 characters where the server allows 65,536
(its log batch was refused) and sent the whole error where 100,000 are allowed (its finish got
422), so the run ended crashed instead of failed; `openruns sync` hit the same 422. The limits
are now written once (openruns.spec) and the server imports them.
"""

from __future__ import annotations

import os
import subprocess
import sys

import orjson

from openruns.api import Client
from openruns.spec import MAX_ERROR_CHARS, MAX_LOG_LINE_CHARS

from .conftest import SRC, get
from .test_console import run_script

LONG_FAILURE = """
import openruns
run = openruns.init(kind="train", name="long error"{mode})
print(run.id, file=open("run_id", "w"))
with run:
    raise ValueError("x" * 100_000 + " the end")
"""


def _check_failed(url: str, run_id: str) -> None:
    run = get(url, f"/runs/{run_id}")
    assert run["status"] == "failed", run["status"]
    error = run["error"]
    assert error.startswith("ValueError: xxx") and "characters cut" in error
    assert len(error) <= MAX_ERROR_CHARS


def test_a_100k_character_exception_fails_the_run_with_it_cut(server, tmp_path):
    outcome = run_script(LONG_FAILURE.format(mode=""), tmp_path, {"OPENRUNS_BASE_URL": server.url})
    assert outcome.startswith("exit 1\n"), outcome[:2000]
    assert "422" not in outcome and "refused" not in outcome, outcome[:2000]
    run_id = (tmp_path / "run_id").read_text().strip()
    _check_failed(server.url, run_id)
    with Client(base_url=server.url) as client:
        tracebacks = [x["line"] for x in client.logs(run_id, stream="traceback")]
    # The traceback's end (the frames nearest the error) is kept, with the marker, in a line
    # the server takes.
    assert len(tracebacks) == 1
    assert len(tracebacks[0]) <= MAX_LOG_LINE_CHARS
    assert tracebacks[0].startswith("[openruns: ") and tracebacks[0].endswith(" the end")


def test_sync_of_a_run_with_a_long_error_fails_it_on_the_server(server, tmp_path):
    outcome = run_script(LONG_FAILURE.format(mode=', mode="offline", dir="runs"'), tmp_path, {})
    assert outcome.startswith("exit 1\n"), outcome[:2000]
    run_id = (tmp_path / "run_id").read_text().strip()
    run_json = tmp_path / "runs" / run_id / "run.json"
    meta = orjson.loads(run_json.read_bytes())
    assert meta["status"] == "failed" and len(meta["error"]) <= MAX_ERROR_CHARS
    # A run directory written before the limits were shared holds the whole error: sync cuts it.
    meta["error"] = "ValueError: " + "x" * 150_000
    run_json.write_bytes(orjson.dumps(meta))
    synced = subprocess.run(
        [sys.executable, "-m", "openruns.cli", "sync", "runs"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": SRC, "OPENRUNS_BASE_URL": server.url},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert synced.returncode == 0, synced.stderr[-2000:]
    _check_failed(server.url, run_id)
