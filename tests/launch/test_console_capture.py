"""Console output kept with the run, in real processes: the owning process's prints and the
traceback of its failure, `openruns launch`'s components (from their log files), `openruns run`'s
command (from its pipes, which also catches C-level output and a crash), and `openruns sync`
delivering them to a server."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from openruns.rundir import iter_stream

from .. import patience
from .helpers import cli_env, openruns_cli, script, the_run

CAPTURE_ON = {"OPENRUNS_CAPTURE_CONSOLE": "1"}


def logs(run_dir) -> list[dict]:
    return list(iter_stream(run_dir, "logs"))


OWNER = """
import sys
import openruns
run = openruns.init(mode="offline", dir="runs")
print("hello from the owner")
print("a warning", file=sys.stderr)
def train():
    raise ValueError("the loss went NaN")
with run:
    train()
"""


def test_the_owners_prints_and_the_traceback_of_its_failure_go_with_the_run(tmp_path):
    owner = script(tmp_path, "owner.py", OWNER)
    proc = subprocess.run(
        [sys.executable, owner],
        cwd=tmp_path,
        env=cli_env(CAPTURE_ON),
        capture_output=True,
        text=True,
        timeout=patience.EXIT,
    )
    assert proc.returncode == 1
    assert "hello from the owner" in proc.stdout  # the terminal still has it
    run_dir, doc = the_run(tmp_path / "runs")
    assert doc["status"] == "failed" and doc["error"] == "ValueError: the loss went NaN"
    lines = logs(run_dir)
    by_stream = {(r["stream"], r["source"]) for r in lines}
    assert ("stdout", "main") in by_stream and ("stderr", "main") in by_stream
    assert [r["line"] for r in lines if r["stream"] == "stdout"] == ["hello from the owner"]
    traceback = [r["line"] for r in lines if r["stream"] == "traceback"]
    assert len(traceback) == 1
    assert traceback[0].startswith("Traceback (most recent call last):")
    assert "in train" in traceback[0] and traceback[0].endswith("ValueError: the loss went NaN")


UNCAUGHT = """
import openruns
run = openruns.init(mode="offline", dir="runs")
print("about to fail")
raise KeyError("missing shard")
"""


def test_an_uncaught_exception_sends_its_traceback_when_the_run_crashes(tmp_path):
    path = script(tmp_path, "uncaught.py", UNCAUGHT)
    proc = subprocess.run(
        [sys.executable, path],
        cwd=tmp_path,
        env=cli_env(CAPTURE_ON),
        capture_output=True,
        text=True,
        timeout=patience.EXIT,
    )
    assert proc.returncode == 1 and "KeyError" in proc.stderr
    run_dir, doc = the_run(tmp_path / "runs")
    assert doc["status"] == "crashed"
    lines = logs(run_dir)
    tracebacks = [r["line"] for r in lines if r["stream"] == "traceback"]
    assert len(tracebacks) == 1 and tracebacks[0].endswith("KeyError: 'missing shard'")
    # Python's own printout of it went through the tee too.
    assert any("KeyError" in r["line"] for r in lines if r["stream"] == "stderr")


def test_capture_off_keeps_nothing(tmp_path):
    path = script(tmp_path, "owner.py", OWNER)
    subprocess.run(
        [sys.executable, path],
        cwd=tmp_path,
        env=cli_env({"OPENRUNS_CAPTURE_CONSOLE": "0"}),
        capture_output=True,
        text=True,
        timeout=patience.EXIT,
    )
    run_dir, _ = the_run(tmp_path / "runs")
    # The traceback of the failure is kept (it is the run's, not the console's); prints are not.
    assert {r["stream"] for r in logs(run_dir)} == {"traceback"}


COMPONENT = """
import os, sys
print("component", os.environ["OPENRUNS_COMPONENT"], "starting", flush=True)
os.write(2, b"from C code, say\\n")
"""


def test_launch_keeps_each_components_output(tmp_path):
    component = script(tmp_path, "component.py", COMPONENT)
    job = tmp_path / "job.toml"
    job.write_text(
        textwrap.dedent(
            f"""
            [run]
            name = "job"
            mode = "offline"
            dir = "runs"

            [[component]]
            name = "trainer"
            command = ["{sys.executable}", "{component}"]

            [[component]]
            name = "orchestrator"
            command = ["{sys.executable}", "{component}"]
            """
        )
    )
    proc = openruns_cli("launch", str(job), cwd=tmp_path, env=CAPTURE_ON)
    assert proc.returncode == 0, proc.stderr
    run_dir, _ = the_run(tmp_path / "runs")
    lines = [(r["source"], r["stream"], r["line"]) for r in logs(run_dir)]
    for name in ("trainer", "orchestrator"):
        assert (name, "output", f"component {name} starting") in lines
        assert (name, "output", "from C code, say") in lines


COMMAND = """
import os, sys
print("step 1: loss 0.5")
sys.stdout.flush()
os.write(2, b"fatal: CUDA error: an illegal memory access\\n")
os.abort()
"""


def test_openruns_run_keeps_the_commands_output_even_when_it_aborts(tmp_path):
    command = script(tmp_path, "command.py", COMMAND)
    proc = openruns_cli(
        "run",
        "--mode",
        "offline",
        "--dir",
        "runs",
        "--",
        sys.executable,
        command,
        cwd=tmp_path,
        env=CAPTURE_ON,
    )
    assert proc.returncode == 128 + 6  # SIGABRT
    # Copied to the launcher's own terminal as it came.
    assert "step 1: loss 0.5" in proc.stdout
    assert "illegal memory access" in proc.stderr
    run_dir, doc = the_run(tmp_path / "runs")
    assert doc["status"] == "failed"
    kept = {(r["source"], r["stream"], r["line"]) for r in logs(run_dir)}
    assert ("job step", "stdout", "step 1: loss 0.5") in kept
    assert ("job step", "stderr", "fatal: CUDA error: an illegal memory access") in kept


def test_a_launcher_inside_a_launcher_sends_the_commands_output_once(tmp_path):
    command = script(tmp_path, "command.py", 'print("only once")\n')
    inner = [sys.executable, "-m", "openruns.cli", "run", "--", sys.executable, command]
    proc = openruns_cli(
        "run", "--mode", "offline", "--dir", "runs", "--", *inner, cwd=tmp_path, env=CAPTURE_ON
    )
    assert proc.returncode == 0, proc.stderr
    assert "attached to run" in proc.stderr  # the inner launcher joined the outer one's run
    run_dir, doc = the_run(tmp_path / "runs")
    assert doc["status"] == "completed"
    kept = [(r["source"], r["line"]) for r in logs(run_dir) if r["line"] == "only once"]
    assert kept == [("job step", "only once")]
