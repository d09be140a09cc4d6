"""Every way a process can end, in a real interpreter, and the status its run gets."""

from __future__ import annotations

import signal
import time

import pytest

from openruns.settings import DEFAULT_DIR

from .. import patience
from .helpers import only_run_dir, python, run_json, spawn

OPEN = """
import openruns
run = openruns.init(kind="train", model="m", mode="offline")
run.log_metrics({"x": 1}, step=0)
"""


def _status(tmp_path):
    doc = run_json(only_run_dir(tmp_path / DEFAULT_DIR))
    return doc["status"], doc["error"]


def test_with_block_clean_exit_completes(tmp_path):
    proc = python(OPEN + "with run:\n    run.log_metrics({'x': 2}, step=1)\n", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _status(tmp_path) == ("completed", None)


def test_with_block_exception_fails_and_propagates(tmp_path):
    proc = python(OPEN + "with run:\n    raise ValueError('bad batch')\n", tmp_path)
    assert proc.returncode == 1
    assert "ValueError: bad batch" in proc.stderr  # the exception still reached the caller
    assert _status(tmp_path) == ("failed", "ValueError: bad batch")


def test_with_block_keyboard_interrupt_cancels(tmp_path):
    proc = python(OPEN + "with run:\n    raise KeyboardInterrupt\n", tmp_path)
    assert proc.returncode != 0
    assert _status(tmp_path) == ("cancelled", "interrupted (KeyboardInterrupt)")


def test_with_block_cancelled_task_cancels(tmp_path):
    code = (
        OPEN
        + """
import asyncio

async def main():
    with run:
        await asyncio.sleep(30)

async def outer():
    task = asyncio.ensure_future(main())
    await asyncio.sleep(0.1)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        print("task cancelled")

asyncio.run(outer())
"""
    )
    proc = python(code, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "task cancelled" in proc.stdout
    assert _status(tmp_path) == ("cancelled", "interrupted (CancelledError)")


def test_exit_without_finish_is_crashed(tmp_path):
    proc = python(OPEN, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _status(tmp_path) == ("crashed", "process exited without finishing the run")


def test_uncaught_exception_without_with_is_crashed_with_its_error(tmp_path):
    proc = python(OPEN + "raise RuntimeError('oom in step 7')\n", tmp_path)
    assert proc.returncode == 1
    status, error = _status(tmp_path)
    assert status == "crashed"
    assert error == "process exited with an uncaught RuntimeError: oom in step 7"


def test_records_logged_before_atexit_are_written(tmp_path):
    proc = python(OPEN + "run.log_episodes([{'id': 'e1', 'traces': []}])\n", tmp_path)
    assert proc.returncode == 0, proc.stderr
    run_dir = only_run_dir(tmp_path / DEFAULT_DIR)
    from .helpers import records

    assert [r["id"] for r in records(run_dir, "episodes")] == ["e1"]
    assert len(records(run_dir, "metrics")) == 1


def _wait_for_line(proc, text: str, timeout: float = patience.START) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if text in line:
            return
    raise AssertionError(f"{text!r} never printed")


@pytest.mark.parametrize(
    ("signum", "seen", "status"),
    [
        # SIGTERM closes the run first, then chains to the handler that was there before.
        (signal.SIGTERM, "crashed", ("crashed", "terminated by SIGTERM")),
        # SIGINT runs the application's handler with the run open; it is cancelled at exit.
        (signal.SIGINT, "running", ("cancelled", "terminated by SIGINT")),
    ],
)
def test_a_signal_chains_to_the_applications_handler(tmp_path, signum, seen, status):
    code = (
        f"""
import signal, sys, time
def previous(signum, frame):
    print("previous handler ran", run.status.value, flush=True)
    sys.exit(7)
signal.signal({int(signum)}, previous)
"""
        + OPEN
        + """
print("ready", flush=True)
time.sleep(30)
"""
    )
    proc = spawn(code, tmp_path)
    _wait_for_line(proc, "ready")
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=patience.EXIT)
    assert f"previous handler ran {seen}" in out, err
    assert proc.returncode == 7
    assert _status(tmp_path) == status


def test_a_trainer_that_catches_ctrl_c_to_checkpoint_keeps_logging(tmp_path):
    # Issue 20: the interrupt reaches the trainer's code with the run open; it checkpoints,
    # logs on, and its own finish decides the status.
    code = (
        OPEN
        + """
import time

import pytest
step = 1
try:
    print("ready", flush=True)
    while True:
        run.log_metrics({"x": step}, step=step)
        step += 1
        time.sleep(0.01)
except KeyboardInterrupt:
    print("checkpointing at", step, run.status.value, flush=True)
run.log_metrics({"checkpointed": 1}, step=step)
run.log_episodes([{"id": "after-ctrl-c", "traces": []}], step=step)
run.finish()
print(run.status.value, step)
"""
    )
    proc = spawn(code, tmp_path)
    _wait_for_line(proc, "ready")
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "checkpointing at" in out and "running" in out.split("checkpointing at")[1], out
    last = int(out.split()[-1])
    assert out.split()[-2] == "completed"
    run_dir = only_run_dir(tmp_path / DEFAULT_DIR)
    assert _status(tmp_path) == ("completed", None)
    from .helpers import records

    rows = records(run_dir, "metrics")
    xs = [r["step"] for r in rows if "x" in r["values"]]
    assert xs == list(range(len(xs))) and len(xs) >= last - 1  # step 0 of OPEN, every one after
    assert rows[-1] == {**rows[-1], "step": last, "values": {"checkpointed": 1}}
    assert [r["id"] for r in records(run_dir, "episodes")] == ["after-ctrl-c"]


def test_an_uncaught_ctrl_c_cancels_the_run_at_exit(tmp_path):
    code = OPEN + "print('ready', flush=True)\nimport time\ntime.sleep(30)\n"
    proc = spawn(code, tmp_path)
    _wait_for_line(proc, "ready")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode != 0 and "KeyboardInterrupt" in err
    assert _status(tmp_path) == ("cancelled", "interrupted (KeyboardInterrupt)")


def test_sigterm_with_default_handler_kills_the_process_after_closing_the_run(tmp_path):
    proc = spawn(OPEN + "print('ready', flush=True)\nimport time\ntime.sleep(30)\n", tmp_path)
    _wait_for_line(proc, "ready")
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=patience.EXIT)
    assert proc.returncode == -signal.SIGTERM  # the default disposition still applies
    assert _status(tmp_path) == ("crashed", "terminated by SIGTERM")


def test_sigint_with_python_default_raises_keyboard_interrupt(tmp_path):
    code = (
        OPEN
        + """
import time

import pytest
try:
    print("ready", flush=True)
    time.sleep(30)
except KeyboardInterrupt:
    print("KeyboardInterrupt raised", flush=True)
"""
    )
    proc = spawn(code, tmp_path)
    _wait_for_line(proc, "ready")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=patience.EXIT)
    assert "KeyboardInterrupt raised" in out, err
    assert _status(tmp_path) == ("cancelled", "terminated by SIGINT")


def test_ctrl_c_traceback_ends_in_the_users_frame_not_in_openruns(tmp_path):
    code = (
        OPEN
        + """
import time

def train():
    print("ready", flush=True)
    time.sleep(30)

train()
"""
    )
    proc = spawn(code, tmp_path)
    _wait_for_line(proc, "ready")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=patience.EXIT)
    frames = [line.strip() for line in err.splitlines() if line.strip().startswith("File ")]
    assert err.rstrip().endswith("KeyboardInterrupt"), err
    assert frames and frames[-1].endswith("in train"), err  # the user's frame, not _on_signal
    assert "openruns" not in " ".join(frames), err
    assert _status(tmp_path) == ("cancelled", "interrupted (KeyboardInterrupt)")


def test_handlers_are_restored_after_finish(tmp_path):
    code = """
import signal
def mine(signum, frame):
    pass
signal.signal(signal.SIGTERM, mine)
import openruns
run = openruns.init(mode="offline")
assert signal.getsignal(signal.SIGTERM) is not mine
run.finish()
assert signal.getsignal(signal.SIGTERM) is mine
assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
print("restored")
"""
    proc = python(code, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "restored" in proc.stdout


def test_log_after_finish_raises(tmp_path):
    code = (
        OPEN
        + """
run.finish()
for call in (lambda: run.log_metrics({"x": 1}), lambda: run.log_episodes([{}]),
             lambda: run.log_traces([{}]), lambda: run.update_summary({"a": 1})):
    try:
        call()
    except openruns.RunFinishedError as exc:
        print("raised:", exc)
run.finish()  # idempotent
print(run.status.value)
"""
    )
    proc = python(code, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("raised:") == 4
    assert proc.stdout.strip().endswith("completed")
