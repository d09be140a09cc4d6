"""`openruns launch job.toml`: components attached to one run, and the first failure fails it."""

from __future__ import annotations

import json
import signal
import sys
import textwrap

from openruns.rundir import iter_stream
from openruns.settings import DEFAULT_DIR

from .. import patience
from .helpers import openruns_cli, script, spawn_cli, the_run, wait_for

COMPONENT = """
import json, os, openruns
from openruns.monitors import MonitorsConfig
run = openruns.init()
config = MonitorsConfig.from_env()
print(json.dumps({"component": os.environ["OPENRUNS_COMPONENT"], "attached": run.attached,
                  "id": run.id, "monitors": config.to_mapping() if config else None}))
run.log_metrics({os.environ["OPENRUNS_COMPONENT"] + "/x": 1.0}, step=0)
run.finish()
"""

TEARDOWN = """
import pathlib, signal, sys, time
out = pathlib.Path(sys.argv[1])
def on_term(signum, frame):
    (out / (sys.argv[2] + ".got")).write_text(signal.Signals(signum).name)
    time.sleep(0.5)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
(out / (sys.argv[2] + ".ready")).write_text("")
time.sleep(60)
"""


def _job(tmp_path, body: str):
    path = tmp_path / "job.toml"
    path.write_text(
        textwrap.dedent(
            """
            [run]
            name = "job"
            mode = "offline"
            dir = "runs"

            [launch]
            grace = 5
            """
        )
        + textwrap.dedent(body)
    )
    return path


def _outputs(log_dir, name):
    return [json.loads(line) for line in (log_dir / f"{name}.log").read_text().splitlines()]


def test_components_attach_and_all_exiting_zero_completes(tmp_path):
    component = script(tmp_path, "component.py", COMPONENT)
    server = script(tmp_path, "server.py", TEARDOWN)
    job = _job(
        tmp_path,
        f"""
        [monitors.file]
        chunk_bytes = 1000000

        [[component]]
        name = "server"
        command = ["{sys.executable}", "{server}", "{tmp_path}", "server"]
        daemon = true

        [[component]]
        name = "trainer"
        command = "{sys.executable} {component}"
        env = {{ EXTRA = "1" }}

        [[component]]
        name = "orchestrator"
        command = ["{sys.executable}", "{component}"]
        [component.monitors.file]
        subsets = ["all"]
        """,
    )
    proc = openruns_cli("launch", str(job), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    run_dir, doc = the_run(tmp_path / "runs")
    assert (doc["status"], doc["error"]) == ("completed", None)
    assert doc["config"]["text"].encode() == job.read_bytes()
    log_dir = tmp_path / "logs" / doc["id"]
    trainer, orchestrator = _outputs(log_dir, "trainer"), _outputs(log_dir, "orchestrator")
    assert trainer[0]["component"] == "trainer"
    assert trainer[0]["attached"] and orchestrator[0]["attached"]
    assert trainer[0]["id"] == orchestrator[0]["id"] == doc["id"]
    # The shared [monitors] block filled each component's; the orchestrator added its own field.
    both = ["all", "effective"]
    assert trainer[0]["monitors"]["file"] == {
        "chunk_bytes": 1000000,
        "subsets": both,
        "float_decimals": 4,
    }
    assert orchestrator[0]["monitors"]["file"] == {
        "chunk_bytes": 1000000,
        "subsets": ["all"],
        "float_decimals": 4,
    }
    keys = sorted(k for row in iter_stream(run_dir, "metrics") for k in row["values"])
    assert keys == ["orchestrator/x", "trainer/x"]
    # The daemon was not waited for: it was stopped once the others were done.
    assert (tmp_path / "server.got").read_text() == "SIGTERM"


def test_a_sigkilled_component_fails_the_run_and_the_others_are_stopped(tmp_path):
    others = script(tmp_path, "other.py", TEARDOWN)
    trainer = script(
        tmp_path,
        "trainer.py",
        """
        import os, pathlib, signal, sys, time
        ready = pathlib.Path(sys.argv[1], "orchestrator.ready")
        while not ready.exists():
            time.sleep(0.02)
        print("trainer: out of memory, presumably", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """,
    )
    job = _job(
        tmp_path,
        f"""
        [[component]]
        name = "orchestrator"
        command = ["{sys.executable}", "{others}", "{tmp_path}", "orchestrator"]

        [[component]]
        name = "trainer"
        command = ["{sys.executable}", "{trainer}", "{tmp_path}"]
        """,
    )
    proc = openruns_cli("launch", str(job), cwd=tmp_path)
    assert proc.returncode == 137, proc.stderr
    _, doc = the_run(tmp_path / "runs")
    assert (doc["status"], doc["error"]) == (
        "failed",
        "Trainer failed with exit code -9",
    )
    assert (tmp_path / "orchestrator.got").read_text() == "SIGTERM"
    assert "trainer: out of memory, presumably" in proc.stderr  # the failed log's tail


def test_sigterm_to_the_launcher_stops_every_component(tmp_path):
    component = script(tmp_path, "component.py", TEARDOWN)
    job = _job(
        tmp_path,
        f"""
        [[component]]
        name = "a"
        command = ["{sys.executable}", "{component}", "{tmp_path}", "a"]

        [[component]]
        name = "b"
        command = ["{sys.executable}", "{component}", "{tmp_path}", "b"]
        """,
    )
    launcher = spawn_cli("launch", str(job), cwd=tmp_path)
    wait_for(tmp_path / "a.ready")
    wait_for(tmp_path / "b.ready")
    launcher.send_signal(signal.SIGTERM)
    launcher.communicate(timeout=patience.EXIT)
    assert launcher.returncode == 143
    assert (tmp_path / "a.got").read_text() == (tmp_path / "b.got").read_text() == "SIGTERM"
    _, doc = the_run(tmp_path / "runs")
    assert (doc["status"], doc["error"]) == ("failed", "terminated by SIGTERM")


def test_monitors_set_differently_in_two_places_is_an_error_naming_both(tmp_path):
    job = _job(
        tmp_path,
        """
        [monitors.wandb]
        project = "rl"

        [[component]]
        name = "trainer"
        command = "true"
        [component.monitors.wandb]
        project = "other"
        """,
    )
    proc = openruns_cli("launch", "--check", str(job), cwd=tmp_path)
    assert proc.returncode == 2
    assert "[monitors].wandb sets 'rl'" in proc.stderr
    assert "[[component]] \"trainer\" monitors.wandb sets 'other'" in proc.stderr
    assert not (tmp_path / "runs").exists()  # nothing was created


def test_job_file_errors_start_nothing(tmp_path):
    cases = {
        "[[component]]\nname = 'a'\ncommand = 'true'\ncmd = 'x'\n": "unknown keys ['cmd']",
        "[[component]]\nname = 'a b'\ncommand = 'true'\n": "name must be",
        "[[component]]\nname = 'a'\ncommand = 'true'\nenv = { RUN_ID = 'x' }\n": "RUN_ID",
        "[[component]]\nname = 'a'\ncommand = []\n": "command is empty",
        "[run]\nkind = 'rl'\n[[component]]\nname = 'a'\ncommand = 'true'\n": "train or eval",
        "[launch]\ngrace = -1\n": "grace",
        "": "no [[component]]",
    }
    for body, message in cases.items():
        path = tmp_path / "bad.toml"
        path.write_text(body)
        proc = openruns_cli("launch", str(path), cwd=tmp_path)
        assert proc.returncode == 2, body
        assert message in proc.stderr, (body, proc.stderr)
    assert not (tmp_path / DEFAULT_DIR).exists()


def test_a_component_that_cannot_start_fails_the_run(tmp_path):
    other = script(tmp_path, "other.py", TEARDOWN)
    job = _job(
        tmp_path,
        f"""
        [[component]]
        name = "orchestrator"
        command = ["{sys.executable}", "{other}", "{tmp_path}", "orchestrator"]

        [[component]]
        name = "trainer"
        command = ["/nonexistent/trainer"]
        """,
    )
    proc = openruns_cli("launch", str(job), cwd=tmp_path)
    assert proc.returncode == 127
    _, doc = the_run(tmp_path / "runs")
    assert doc["status"] == "failed"
    assert doc["error"].startswith("Trainer could not be started")


def test_a_components_exception_is_the_runs_error(tmp_path):
    others = script(tmp_path, "other.py", TEARDOWN)
    trainer = script(
        tmp_path,
        "trainer.py",
        """
        import openruns
        run = openruns.init(kind="train", name="named-by-the-trainer")
        raise RuntimeError("boom")
        """,
    )
    job = _job(
        tmp_path,
        f"""
        [[component]]
        name = "orchestrator"
        command = ["{sys.executable}", "{others}", "{tmp_path}", "orchestrator"]

        [[component]]
        name = "trainer"
        command = ["{sys.executable}", "{trainer}"]
        """,
    )
    proc = openruns_cli("launch", str(job), cwd=tmp_path)
    assert proc.returncode == 1
    _, doc = the_run(tmp_path / "runs")
    # [run] name = "job" was set by the launch: the trainer's name does not replace it.
    assert (doc["status"], doc["error"], doc["name"]) == (
        "failed",
        "RuntimeError: boom (trainer)",
        "job",
    )
