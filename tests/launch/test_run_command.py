"""`openruns run -- CMD`: a real owner process around a real command, every way it can end."""

from __future__ import annotations

import json
import signal
import sys

from openruns.rundir import iter_stream

from .. import patience
from .helpers import openruns_cli, script, spawn_cli, the_run, wait_for

ATTACH_CHILD = """
import json, os, openruns
run = openruns.init(kind="eval")
print(json.dumps({"attached": run.attached, "id": run.id,
                  "env": os.environ["OPENRUNS_RUN_ID"], "compat": os.environ["RUN_ID"]}))
run.log_metrics({"loss": 0.5}, step=0)
run.log_episodes([{"id": "e1", "traces": [{"reward": 1.0}]}], step=0)
run.finish(status="failed", error="a child must not close the run")
"""

TEARDOWN_CHILD = """
import pathlib, signal, sys, time
out = pathlib.Path(sys.argv[1])
def on_signal(signum, frame):
    (out / "got").write_text(signal.Signals(signum).name)
    time.sleep(1.0)  # a short teardown
    (out / "teardown-done").write_text("")
    sys.exit(0)
signal.signal(signal.SIGTERM, on_signal)
signal.signal(signal.SIGINT, on_signal)
(out / "ready").write_text("")
time.sleep(60)
"""


def _run(tmp_path, *command, options=()):
    return openruns_cli(
        "run", "--mode", "offline", "--dir", "runs", *options, "--", *command, cwd=tmp_path
    )


def test_exit_zero_completes_and_a_child_attaches_without_finishing(tmp_path):
    config = tmp_path / "rl.toml"
    config.write_bytes(b"# the launch config\nlr = 1e-6\n\n[model]\nname = 'm'  \n")
    child = script(tmp_path, "child.py", ATTACH_CHILD)
    proc = _run(
        tmp_path,
        sys.executable,
        child,
        options=("--config", str(config), "--name", "rl", "--model", "m"),
    )
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    run_dir, doc = the_run(tmp_path / "runs")
    assert seen == {"attached": True, "id": doc["id"], "env": doc["id"], "compat": doc["id"]}
    assert (doc["status"], doc["error"]) == ("completed", None)
    assert (doc["name"], doc["kind"], doc["model"]) == ("rl", "train", "m")
    assert doc["config"]["text"].encode() == config.read_bytes()  # byte for byte
    assert [r["values"] for r in iter_stream(run_dir, "metrics")] == [{"loss": 0.5}]
    assert [e["id"] for e in iter_stream(run_dir, "episodes")] == ["e1"]


def test_exit_code_fails_the_run_and_is_the_owners(tmp_path):
    proc = _run(tmp_path, "sh", "-c", "exit 3")
    assert proc.returncode == 3
    _, doc = the_run(tmp_path / "runs")
    assert (doc["status"], doc["error"]) == (
        "failed",
        "the command exited with code 3",
    )


def test_command_killed_by_a_signal(tmp_path):
    proc = _run(tmp_path, "sh", "-c", "kill -KILL $$")
    assert proc.returncode == 137
    _, doc = the_run(tmp_path / "runs")
    assert doc["error"] == "the command was killed by SIGKILL"


def test_sigterm_is_forwarded_and_the_child_tears_down(tmp_path):
    child = script(tmp_path, "child.py", TEARDOWN_CHILD)
    owner = spawn_cli(
        "run", "--mode", "offline", "--dir", "runs", "--", sys.executable, child, str(tmp_path),
        cwd=tmp_path,
    )  # fmt: skip
    wait_for(tmp_path / "ready")
    owner.send_signal(signal.SIGTERM)
    _, stderr = owner.communicate(timeout=patience.EXIT)
    assert owner.returncode == 143, stderr
    assert (tmp_path / "got").exists(), stderr  # the child was signalled, not killed at once
    assert (tmp_path / "got").read_text() == "SIGTERM"
    assert (tmp_path / "teardown-done").exists()  # the owner waited for the teardown
    _, doc = the_run(tmp_path / "runs")
    assert (doc["status"], doc["error"]) == ("failed", "terminated by SIGTERM")


def test_sigint_cancels(tmp_path):
    child = script(tmp_path, "child.py", TEARDOWN_CHILD)
    owner = spawn_cli(
        "run", "--mode", "offline", "--dir", "runs", "--", sys.executable, child, str(tmp_path),
        cwd=tmp_path,
    )  # fmt: skip
    wait_for(tmp_path / "ready")
    owner.send_signal(signal.SIGINT)
    owner.communicate(timeout=patience.EXIT)
    assert owner.returncode == 130
    assert (tmp_path / "got").read_text() == "SIGINT"
    _, doc = the_run(tmp_path / "runs")
    assert (doc["status"], doc["error"]) == ("cancelled", "terminated by SIGINT")


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(tmp_path):
    child = script(
        tmp_path,
        "stubborn.py",
        """
        import pathlib, signal, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        pathlib.Path(sys.argv[1], "ready").write_text("")
        time.sleep(60)
        """,
    )
    owner = spawn_cli(
        "run", "--mode", "offline", "--dir", "runs", "--grace", "0.5", "--",
        sys.executable, child, str(tmp_path), cwd=tmp_path,
    )  # fmt: skip
    wait_for(tmp_path / "ready")
    owner.send_signal(signal.SIGTERM)
    _, stderr = owner.communicate(timeout=patience.EXIT)
    assert owner.returncode == 143
    assert "SIGKILL" in stderr
    _, doc = the_run(tmp_path / "runs")
    assert doc["error"] == "terminated by SIGTERM"


def test_processes_left_in_the_group_are_stopped(tmp_path):
    # The command exits 0 but leaves a background process behind: the owner stops it.
    proc = _run(tmp_path, "sh", "-c", f"(sleep 60; touch {tmp_path}/leftover) & echo started")
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "leftover").exists()
    _, doc = the_run(tmp_path / "runs")
    assert doc["status"] == "completed"


def test_usage_errors(tmp_path):
    proc = openruns_cli("run", "--mode", "offline", cwd=tmp_path)
    assert proc.returncode == 2 and "no command given" in proc.stderr
    proc = _run(tmp_path, "true", options=("--config", "missing.toml"))
    assert proc.returncode == 2 and "missing.toml" in proc.stderr
    proc = _run(tmp_path, "/nonexistent/command")
    assert proc.returncode == 127
    _, doc = the_run(tmp_path / "runs")
    assert doc["status"] == "failed" and "could not be started" in doc["error"]


def test_a_launcher_inside_a_launch_attaches_and_leaves_the_status_to_the_owner(tmp_path):
    inner = f"{sys.executable} -m openruns.cli run -- sh -c 'exit 5'; exit 0"
    proc = _run(tmp_path, "sh", "-c", inner)
    assert proc.returncode == 0, proc.stderr
    assert "attached to run" in proc.stderr
    _, doc = the_run(tmp_path / "runs")  # one run: the inner launcher created none
    assert (doc["status"], doc["error"]) == ("completed", None)


def test_sighup_fails_the_run(tmp_path):
    child = script(tmp_path, "child.py", TEARDOWN_CHILD)
    owner = spawn_cli(
        "run", "--mode", "offline", "--dir", "runs", "--", sys.executable, child, str(tmp_path),
        cwd=tmp_path,
    )  # fmt: skip
    wait_for(tmp_path / "ready")
    owner.send_signal(signal.SIGHUP)
    owner.communicate(timeout=patience.EXIT)
    assert owner.returncode == 129
    _, doc = the_run(tmp_path / "runs")
    assert (doc["status"], doc["error"]) == ("failed", "terminated by SIGHUP")


NAMING_CHILD = """
import openruns
run = openruns.init(kind="eval", name="named-by-the-trainer", tags=["rl", "qwen"],
                    config={"lr": 1e-6}, model="ignored: the owner set one")
run.log_metrics({"loss": 0.5}, step=0)
raise RuntimeError("boom")
"""


def test_a_child_fills_in_the_run_and_its_exception_is_the_runs_error(tmp_path):
    child = script(tmp_path, "trainer.py", NAMING_CHILD)
    proc = _run(tmp_path, sys.executable, child, options=("--model", "Qwen/Qwen3-8B"))
    assert proc.returncode == 1
    _, doc = the_run(tmp_path / "runs")
    assert (doc["name"], doc["tags"], doc["model"]) == (
        "named-by-the-trainer",
        ["rl", "qwen"],
        "Qwen/Qwen3-8B",
    )
    assert doc["config"]["format"] == "json" and json.loads(doc["config"]["text"]) == {"lr": 1e-6}
    assert (doc["status"], doc["error"]) == ("failed", "RuntimeError: boom (trainer.py)")


def test_a_run_nobody_named_is_named_when_it_closes(tmp_path):
    proc = _run(tmp_path, "true", options=("--model", "Qwen/Qwen3-8B"))
    assert proc.returncode == 0, proc.stderr
    _, doc = the_run(tmp_path / "runs")
    assert doc["name"].startswith("Qwen3-8B-")


def test_under_slurm_the_messages_name_slurm(tmp_path):
    slurm = {"SLURM_JOB_ID": "4242"}
    proc = openruns_cli(
        "run", "--mode", "offline", "--dir", "runs", "--", "sh", "-c", "exit 3",
        cwd=tmp_path, env=slurm,
    )  # fmt: skip
    assert proc.returncode == 3
    _, doc = the_run(tmp_path / "runs")
    assert doc["error"] == "RuntimeError: The SLURM job step exited with code 3"

    child = script(tmp_path, "child.py", TEARDOWN_CHILD)
    owner = spawn_cli(
        "run", "--mode", "offline", "--dir", "cancelled", "--", sys.executable, child,
        str(tmp_path), cwd=tmp_path, env=slurm,
    )  # fmt: skip
    wait_for(tmp_path / "ready")
    owner.send_signal(signal.SIGTERM)  # scancel, or the time limit
    owner.communicate(timeout=patience.EXIT)
    assert owner.returncode == 143
    _, doc = the_run(tmp_path / "cancelled")
    assert (doc["status"], doc["error"]) == ("failed", "RuntimeError: SLURM terminated the job")
