"""
How a W&B run ends, from the real wandb 0.31.0 SDK in a subprocess: `finish(exit_code=1)`
and an uncaught exception fail the run with the last lines of its output; SIGTERM (the SDK
then sends nothing more) leaves it to the server's sweeper, which crashes it; a stop asked
for on the dashboard (POST /runs/{id}/stop) reaches the SDK through the file stream and the
run ends cancelled.
"""

from __future__ import annotations

import signal
import uuid

import httpx
import pytest

from openruns.api import Client
from tests.server.helpers import ServerProcess

from .helpers import (
    LOOP,
    SCRIPT_TIMEOUT,
    end,
    poll,
    run_script,
    start_script,
    wait_exit,
    wait_ready,
)


def new_id() -> str:
    return f"x{uuid.uuid4().hex[:10]}"


def test_exit_code_1_fails_the_run(client, server, tmp_path):
    run_id = new_id()
    code = """
    import sys, wandb
    run = wandb.init(project="exits", id=sys.argv[1])
    run.log({"loss": 1.0})
    print("the last words", file=sys.stderr)
    run.finish(exit_code=1)
    """
    run_script(tmp_path, code, server.url, run_id)
    run = client.run(run_id)
    assert run["status"] == "failed"
    assert "the last words" in run["error"]


def test_an_uncaught_exception_fails_the_run_with_its_traceback(client, server, tmp_path):
    run_id = new_id()
    code = """
    import sys, wandb
    run = wandb.init(project="exits", id=sys.argv[1])
    run.log({"loss": 1.0})
    raise RuntimeError("diverged at step 3")
    """
    done = run_script(tmp_path, code, server.url, run_id, check=False)
    assert done.returncode == 1, done.stderr
    run = client.run(run_id)
    assert run["status"] == "failed"
    assert "Traceback" in run["error"] and "RuntimeError: diverged at step 3" in run["error"]
    assert run["error"].splitlines()[-1] == "RuntimeError: diverged at step 3"


@pytest.mark.slow
def test_sigterm_leaves_the_run_to_the_sweeper_which_crashes_it(tmp_path):
    # A heartbeat timeout shorter than the SDK's 30 s heartbeats: only this test's server.
    server = ServerProcess(tmp_path / "data", "--heartbeat-timeout", "6").start()
    try:
        run_id = new_id()
        proc = start_script(tmp_path, LOOP, server.url, run_id)
        try:
            wait_ready(proc)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(SCRIPT_TIMEOUT) == -signal.SIGTERM
        finally:
            end(proc)
        with Client(base_url=server.url) as client:
            run = poll(
                lambda: client.run(run_id),
                lambda r: r["status"] != "running",
                what="the run to be crashed",
            )
        assert run["status"] == "crashed"
        assert "no heartbeat" in run["error"]
    finally:
        server.stop()


@pytest.mark.slow
def test_a_dashboard_stop_reaches_the_sdk_and_cancels_the_run(client, server, tmp_path):
    run_id = new_id()
    proc = start_script(tmp_path, LOOP, server.url, run_id)
    try:
        wait_ready(proc)
        answer = httpx.post(f"{server.url}/api/v1/runs/{run_id}/stop", timeout=30)
        assert answer.status_code == 200, answer.text
        assert answer.json()["stop_requested_at"] is not None
        # The SDK polls its stop status every 15 s, then interrupts the script's main thread.
        wait_exit(proc, tmp_path)
    finally:
        output = end(proc)
    assert proc.returncode != 0 and "KeyboardInterrupt" in output
    run = client.run(run_id)
    assert run["status"] == "cancelled"
    assert run["error"] == "stopped from the dashboard"


def test_stopping_a_finished_run_is_a_conflict(client, server, tmp_path):
    run_id = new_id()
    code = """
    import sys, wandb
    wandb.init(project="exits", id=sys.argv[1]).finish()
    """
    run_script(tmp_path, code, server.url, run_id)
    answer = httpx.post(f"{server.url}/api/v1/runs/{run_id}/stop", timeout=30)
    assert answer.status_code == 409
    assert "already completed" in answer.json()["error"]["message"]
