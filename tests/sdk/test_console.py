"""Console capture: lines cut from writes, the tee of sys.stdout/sys.stderr in a real process
(the terminal still gets everything), its bound, a child's pipe read from another process
(a crashing child loses nothing), files followed for launched components, tracebacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from openruns import console
from openruns.console import (
    ConsoleCapture,
    FileFollower,
    PipeTee,
)

from .. import patience
from .helpers import only_run_dir, python, records


def lines_of(records: list[dict]) -> list[str]:
    return [r["line"] for r in records]


CAPTURE = """
import json, sys, time
from openruns.console import ConsoleCapture
out = open(sys.argv[1], "w")
def emit(records):
    for r in records:
        out.write(json.dumps(r) + "\\n")
    out.flush()
capture = ConsoleCapture(emit, source="main", flush_interval=0.05)
original = sys.stdout
capture.start()
print("hello from stdout")
print("a warning", file=sys.stderr)
sys.stdout.write("part one, ")
sys.stdout.flush()
time.sleep(0.2)
print("part two")
sys.stdout.writelines(["a\\n", "b\\n"])
print("no newline at the end", end="")
capture.stop()
assert sys.stdout is original
print("after stop")
"""


def test_the_tee_keeps_the_terminal_and_captures_lines(tmp_path):
    records_file = tmp_path / "records.ndjson"
    done = python(CAPTURE, tmp_path, argv=[str(records_file)])
    assert done.returncode == 0, done.stderr
    # The real streams got every write, as without the capture.
    assert done.stdout == (
        "hello from stdout\npart one, part two\na\nb\nno newline at the endafter stop\n"
    )
    assert done.stderr == "a warning\n"
    records = [json.loads(line) for line in records_file.read_text().splitlines()]
    by_stream = {
        name: [r["line"] for r in records if r["stream"] == name] for name in ("stdout", "stderr")
    }
    assert by_stream == {
        "stdout": ["hello from stdout", "part one, part two", "a", "b", "no newline at the end"],
        "stderr": ["a warning"],
    }
    assert all(r["source"] == "main" and r["ts"] > 0 for r in records)


def test_stop_leaves_a_stream_someone_else_replaced_after_us():
    emitted: list[dict] = []
    capture = ConsoleCapture(emitted.extend, flush_interval=0.01)
    before = sys.stdout
    capture.start()
    try:
        theirs = open(__file__)  # noqa: SIM115 - any object standing in for another tool's stream
        sys.stdout = theirs
        capture.stop()
        assert sys.stdout is theirs
    finally:
        sys.stdout = before
        theirs.close()


CRASHING_CHILD = """
import os
print("buffered by Python", flush=True)
os.write(1, b"last words\\n")
os.write(2, b"fatal: about to abort\\n")
os.abort()
"""


def test_a_childs_pipes_are_read_from_another_process_so_a_crash_loses_nothing(tmp_path):
    copy = tmp_path / "terminal.txt"
    emitted: list[dict] = []
    with copy.open("wb") as terminal:
        child = subprocess.Popen(
            [sys.executable, "-c", CRASHING_CHILD], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        tees = [
            PipeTee(child.stdout, terminal.fileno(), "stdout", "job step", emitted.extend).start(),
            PipeTee(child.stderr, terminal.fileno(), "stderr", "job step", emitted.extend).start(),
        ]
        assert child.wait(timeout=patience.EXIT) < 0  # killed by SIGABRT
        for tee in tees:
            tee.join(timeout=30)
    assert sorted(lines_of(emitted)) == [
        "buffered by Python",
        "fatal: about to abort",
        "last words",
    ]
    assert {r["source"] for r in emitted} == {"job step"}
    assert "last words" in copy.read_text() and "fatal: about to abort" in copy.read_text()


def test_followed_files_become_output_lines_per_component(tmp_path):
    emitted: list[dict] = []
    follower = FileFollower(emitted.extend, interval=0.05)
    trainer, orchestrator = tmp_path / "trainer.log", tmp_path / "orchestrator.log"
    trainer.write_text("step 1\n")
    follower.follow("trainer", trainer)
    follower.follow("orchestrator", orchestrator)  # not created yet
    follower.start()
    deadline = time.monotonic() + patience.SETTLE
    while not emitted and time.monotonic() < deadline:
        time.sleep(0.02)
    with trainer.open("a") as fh:
        fh.write("step 2\nhalf a li")
    orchestrator.write_text("ready\n")
    follower.stop()
    per_source = {
        source: [r["line"] for r in emitted if r["source"] == source]
        for source in ("trainer", "orchestrator")
    }
    assert per_source == {"trainer": ["step 1", "step 2", "half a li"], "orchestrator": ["ready"]}
    assert {r["stream"] for r in emitted} == {"output"}


def test_the_capture_thread_sleeps_until_written_to(tmp_path: Path):
    emitted: list[dict] = []
    capture = ConsoleCapture(emitted.extend, flush_interval=0.01)
    capture.start()
    try:
        deadline = time.monotonic() + patience.SETTLE
        while not capture._sleeping and time.monotonic() < deadline:
            time.sleep(0.01)
        assert capture._sleeping  # idle: blocked on the wake pipe, not polling
        print("wake up")
        deadline = time.monotonic() + patience.SETTLE
        while not emitted and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        capture.stop()
    assert lines_of(emitted) == ["wake up"]


def test_a_fork_after_stop_closes_none_of_the_childs_descriptors(tmp_path):
    # The capture's wake pipe is closed at stop; its numbers are then reused (here by the
    # subprocess's own pipes), and the fork hook must not close them again in the child.
    capture = ConsoleCapture(lambda records: None, flush_interval=0.01)
    capture.start()
    capture.stop()
    assert (capture._wake_r, capture._wake_w) == (-1, -1)
    for _ in range(5):
        done = subprocess.run(
            [sys.executable, "-c", "print('ok')"],
            cwd=tmp_path,
            preexec_fn=lambda: None,  # runs Python's fork hooks in the child
            capture_output=True,
            text=True,
            timeout=patience.EXIT,
        )
        assert done.stdout == "ok\n"


FORKING_OWNER = """
import os, sys
import openruns
from openruns.rundir import iter_stream
original = sys.stdout
run = openruns.init(mode="offline", dir="runs")
print("before the fork", flush=True)  # still waiting in the capture when the child is made
pid = os.fork()
if pid == 0:
    code = 1
    try:
        print("from the child", flush=True)
        code = 0 if run.attached else 2
        run.finish()  # attached: flushes its own records only
    finally:
        os._exit(code)
_, status = os.waitpid(pid, 0)
print("after the fork")
run.finish()
assert sys.stdout is original, sys.stdout  # restored at finish
print("after finish")
sys.exit(os.waitstatus_to_exitcode(status))
"""


def test_a_fork_captures_nothing_twice_and_the_owner_restores_its_streams(tmp_path):
    done = python(FORKING_OWNER, tmp_path, env={"OPENRUNS_CAPTURE_CONSOLE": "1"})
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    assert sorted(printed) == sorted(
        ["before the fork", "from the child", "after the fork", "after finish"]
    )
    run_dir = only_run_dir(tmp_path / "runs")
    kept = [(r["stream"], r["source"], r["line"]) for r in records(run_dir, "logs")]
    # The parent's pending line went once (the child dropped its copy); the child, attached to
    # the run, is not captured; nothing after finish is.
    assert kept == [("stdout", "main", "before the fork"), ("stdout", "main", "after the fork")]


def test_a_followed_file_that_grew_too_fast_is_skipped_to_its_end_and_the_skip_said(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(console, "MAX_HELD_BYTES", 100)
    emitted: list[dict] = []
    skipped: list[int] = []
    log = tmp_path / "trainer.log"
    log.write_text("".join(f"line {i:04d}\n" for i in range(100)))  # 1,000 bytes
    follower = FileFollower(emitted.extend, interval=3600, on_skip=skipped.append)
    follower.follow("trainer", log)
    follower.start()
    follower.stop()  # one pass, the final one
    assert skipped == [900] and follower.dropped_bytes == 900
    assert lines_of(emitted)[0].startswith("[openruns: 900 bytes of this output were skipped")
    assert lines_of(emitted)[1:] == [f"line {i:04d}" for i in range(90, 100)]


def test_a_pipe_read_faster_than_its_interval_is_handed_on_in_bounded_batches(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(console, "MAX_HELD_BYTES", 100)
    batches: list[list[dict]] = []
    read_fd, write_fd = os.pipe()
    with open(os.devnull, "wb") as devnull:
        tee = PipeTee(os.fdopen(read_fd, "rb"), devnull.fileno(), "stdout", "job step",
                      batches.append, flush_interval=3600).start()  # fmt: skip
        for i in range(50):
            os.write(write_fd, f"line {i:04d}\n".encode())  # 500 bytes, in 50 reads or fewer
        # Handed on before the pipe ends and long before the interval: the bound did it.
        deadline = time.monotonic() + patience.SETTLE
        while not batches and time.monotonic() < deadline:
            time.sleep(0.01)
        assert batches
        os.close(write_fd)
        tee.join(timeout=30)
    assert [r["line"] for batch in batches for r in batch] == [f"line {i:04d}" for i in range(50)]
