"""
The seeds' run contract against a real server, in real processes: a hosted run created by a
scheduler and closed by it, components that attach and only flush, a resume with `id=`,
prime-rl's training attach.
"""

from __future__ import annotations

from .conftest import cli, env_for, python

COMPONENT = """
import os, openruns
run = openruns.init(kind="train")
assert run.attached and run.id == os.environ["RUN_ID"], (run.attached, run.id)
run.log_metrics({os.environ["OPENRUNS_COMPONENT"] + "/loss": 0.5}, step=1)
run.log_episodes([{"id": "ep-" + os.environ["OPENRUNS_COMPONENT"], "traces": []}], step=1)
if os.environ.get("FAIL"):
    raise RuntimeError("boom")
run.finish()  # attached: a flush, never a status
"""


def _attach_env(created: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in created.strip().splitlines())


def test_a_scheduler_creates_components_attach_and_only_flush_the_scheduler_finishes(
    server, api, tmp_path
):
    env = env_for(server, tmp_path)
    created = cli("runs", "create", "--name", "hosted", "--format", "env", env=env, cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    exported = _attach_env(created.stdout)
    run_id = exported["OPENRUNS_RUN_ID"]
    assert exported["RUN_ID"] == run_id and exported["OPENRUNS_API_KEY"].startswith("orr_")
    for component in ("trainer", "orchestrator"):
        proc = python(COMPONENT, {**env, **exported, "OPENRUNS_COMPONENT": component}, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    doc = api.get(f"/runs/{run_id}").json()
    assert (doc["status"], doc["name"]) == ("running", "hosted")
    keys = {k["key"] for k in api.get(f"/runs/{run_id}/metrics/keys").json()}
    assert keys == {"trainer/loss", "orchestrator/loss"}
    episodes = api.get(f"/runs/{run_id}/episodes").json()["items"]
    assert sorted(e["id"] for e in episodes) == ["ep-orchestrator", "ep-trainer"]

    listed = cli("runs", "ls", "--status", "running", env=env, cwd=tmp_path)
    assert run_id in listed.stdout and "hosted" in listed.stdout, listed.stderr
    finished = cli("runs", "finish", run_id, "--status", "completed", env=env, cwd=tmp_path)
    assert finished.returncode == 0, finished.stderr
    assert api.get(f"/runs/{run_id}").json()["status"] == "completed"
    shown = cli("runs", "show", run_id, env=env, cwd=tmp_path)
    assert "status: completed" in shown.stdout
    assert "status set: completed by owner" in shown.stdout
    again = cli("runs", "finish", run_id, "--status", "failed", env=env, cwd=tmp_path)
    assert again.returncode == 1 and "already completed" in again.stderr


def test_a_failed_component_reports_its_error_for_the_scheduler(server, api, tmp_path):
    env = env_for(server, tmp_path)
    created = cli("runs", "create", "--format", "env", env=env, cwd=tmp_path)
    exported = _attach_env(created.stdout)
    run_id = exported["OPENRUNS_RUN_ID"]
    proc = python(
        COMPONENT,
        {**env, **exported, "OPENRUNS_COMPONENT": "trainer", "FAIL": "1"},
        cwd=tmp_path,
    )
    assert proc.returncode == 1 and "RuntimeError: boom" in proc.stderr
    assert api.get(f"/runs/{run_id}").json()["status"] == "running"  # the report is no status
    cli("runs", "finish", run_id, "--status", "failed", env=env, cwd=tmp_path)
    doc = api.get(f"/runs/{run_id}").json()
    assert (doc["status"], doc["error"]) == ("failed", "RuntimeError: boom (trainer)")


CRASHING_OWNER = """
import openruns
run = openruns.init(kind="eval", name="resumable")
run.log_metrics({"score": 0.5}, step=0)
print(run.id)
"""  # exits without finishing: the run is crashed

RESUME = """
import sys, openruns
run = openruns.init(id=sys.argv[1])
run.log_metrics({"score": 0.75}, step=1)
run.finish()
"""


def test_a_resume_with_id_reopens_a_crashed_run_and_completes_it(server, api, tmp_path):
    env = env_for(server, tmp_path)
    first = python(CRASHING_OWNER, env, cwd=tmp_path)
    run_id = first.stdout.strip()
    assert api.get(f"/runs/{run_id}").json()["status"] == "crashed"
    resumed = python(RESUME.replace("sys.argv[1]", repr(run_id)), env, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    doc = api.get(f"/runs/{run_id}").json()
    assert (doc["status"], doc["error"], doc["name"]) == ("completed", None, "resumable")
    series = api.get(f"/runs/{run_id}/metrics", params={"keys": "score"}).json()["series"]
    assert series["score"]["step"] == [0, 1]


TRAIN_ATTACH = """
import sys, openruns
run = openruns.init(kind="train", id=RUN)
run.log_metrics({"loss": 1.0}, step=0)
if sys.argv[1:] == ["fail"]:
    run.fail("RuntimeError: orchestrator crashed")
else:
    run.finish()
"""


def test_a_training_attach_completes_but_leaves_failures_to_the_owner(server, api, tmp_path):
    env = env_for(server, tmp_path)
    run_id = cli("runs", "create", env=env, cwd=tmp_path).stdout.strip()
    code = TRAIN_ATTACH.replace("RUN", repr(run_id))
    failed = python(code.replace("sys.argv[1:]", "['fail']"), env, cwd=tmp_path)
    assert "left to the launcher or scheduler" in failed.stderr
    assert api.get(f"/runs/{run_id}").json()["status"] == "running"
    done = python(code, env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert api.get(f"/runs/{run_id}").json()["status"] == "completed"


# -- seed 000's hosted flow: the platform creates the run and passes only RUN_ID to each pod ----

POD = """
import os, openruns
run = openruns.init(kind="train", id=os.environ["RUN_ID"])  # prime-rl's monitor, verbatim
assert run.attached, "an id from the environment is an attach"
name = os.environ["OPENRUNS_COMPONENT"]
for step in range(int(FIRST), int(LAST)):
    run.log_metrics({name + "/loss": 1.0 / (step + 1)}, step=step)
run.log_episodes([{"id": "ep-" + name, "traces": []}], step=0)
run.finish()  # a clean finish here is a flush: the run is not this pod's to complete
print(run.status.value)
"""

MONITORED_POD = """
import asyncio
from openruns.monitors import Monitors, MonitorsConfig, OpenrunsMonitorConfig

async def main():
    config = MonitorsConfig(openruns=OpenrunsMonitorConfig())
    monitors = Monitors.from_config(config, producer="orchestrator", output_dir=OUT)
    await monitors.log({"orchestrator/reward": 0.5}, step=7)
    await monitors.log({"inference/queue": 3.0}, step=None)
    await monitors.log([{"id": "ep-monitored", "traces": []}], step=7, kind="train",
                       subset="effective")
    await monitors.finalize()

asyncio.run(main())
"""


def _pod_env(server, tmp_path, run_id: str, component: str) -> dict[str, str]:
    env = env_for(server, tmp_path, RUN_ID=run_id, OPENRUNS_COMPONENT=component)
    for name in ("OPENRUNS_RUN_ID", "OPENRUNS_RUN_PID", "OPENRUNS_RUN_HOST", "OPENRUNS_RUN_DIR"):
        env.pop(name, None)
    return env


def test_pods_attached_through_run_id_only_flush_and_the_first_to_finish_closes_nothing(
    server, api, tmp_path
):
    created = cli("runs", "create", "--name", "hosted", env=env_for(server, tmp_path), cwd=tmp_path)
    run_id = created.stdout.strip()
    trainer = python(
        POD.replace("FIRST", "0").replace("LAST", "3"),
        _pod_env(server, tmp_path, run_id, "trainer"),
        cwd=tmp_path,
    )
    assert trainer.returncode == 0 and trainer.stdout.strip() == "completed", trainer.stderr
    assert api.get(f"/runs/{run_id}").json()["status"] == "running"  # the first finished early
    # The orchestrator goes on long after: its rows are taken, not refused as a closed run's.
    orchestrator = python(
        POD.replace("FIRST", "3").replace("LAST", "10"),
        _pod_env(server, tmp_path, run_id, "orchestrator"),
        cwd=tmp_path,
    )
    assert orchestrator.returncode == 0, orchestrator.stderr
    monitored = python(
        MONITORED_POD.replace("OUT", repr(str(tmp_path / "out"))),
        _pod_env(server, tmp_path, run_id, "orchestrator"),
        cwd=tmp_path,
    )
    assert monitored.returncode == 0, monitored.stderr
    doc = api.get(f"/runs/{run_id}").json()
    assert (doc["status"], doc["name"]) == ("running", "hosted")
    series = api.get(f"/runs/{run_id}/metrics", params={"max_points": 0}).json()
    assert series["series"]["trainer/loss"]["step"] == [0, 1, 2]
    assert series["series"]["orchestrator/loss"]["step"] == list(range(3, 10))
    assert series["series"]["orchestrator/reward"]["step"] == [7]
    assert len(series["time"]["inference/queue"]["ts"]) == 1  # a row without a step: its time
    episodes = api.get(f"/runs/{run_id}/episodes").json()["items"]
    assert sorted(e["id"] for e in episodes) == ["ep-monitored", "ep-orchestrator", "ep-trainer"]
    # Whoever created the run sets its status (the platform, from the JobSet).
    env = env_for(server, tmp_path)
    finished = cli("runs", "finish", run_id, "--status", "completed", env=env, cwd=tmp_path)
    assert finished.returncode == 0, finished.stderr
    assert api.get(f"/runs/{run_id}").json()["status"] == "completed"
