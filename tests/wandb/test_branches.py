"""
One W&B run written by several processes, or continued: resume by id (allow, must, never),
`fork_from="<id>?_step=N"`, shared mode (two processes at once, each labelled), and an
offline run uploaded later with `wandb sync DIR`; the real wandb 0.31.0 SDK in subprocesses,
read back through the native API.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from .helpers import SCRIPT_TIMEOUT, api, run_script, start_script, wait_ready, wandb_env


def new_id() -> str:
    return f"b{uuid.uuid4().hex[:10]}"


LOG = """
import sys, wandb
run_id, resume, start = sys.argv[1], sys.argv[2], int(sys.argv[3])
try:
    run = wandb.init(project="branches", id=run_id, resume=None if resume == "-" else resume)
except Exception as exc:
    print(f"init failed: {type(exc).__name__}: {exc}")
    sys.exit(3)
for i in range(start, start + 3):
    run.log({"loss": float(i)})
run.finish()
"""


def steps(client, run_id: str, key: str = "loss") -> dict[int, float]:
    return {r["step"]: r["value"] for r in client.metrics(run_id, keys=[key])}


def test_resume_allow_continues_the_run_at_its_next_step(client, server, tmp_path):
    run_id = new_id()
    run_script(tmp_path, LOG, server.url, run_id, "allow", "0")
    assert client.run(run_id)["status"] == "completed"
    run_script(tmp_path, LOG, server.url, run_id, "allow", "10")
    assert steps(client, run_id) == {0: 0.0, 1: 1.0, 2: 2.0, 3: 10.0, 4: 11.0, 5: 12.0}
    assert client.run(run_id)["status"] == "completed"


def test_resume_must_on_an_unknown_id_is_a_clear_error(client, server, tmp_path):
    run_id = new_id()
    done = run_script(tmp_path, LOG, server.url, run_id, "must", "0", check=False)
    assert done.returncode == 3, done.stdout + done.stderr
    assert f"Run ({run_id}) does not exist" in done.stdout
    assert run_id not in {r["id"] for r in client.runs(project="branches")}


def test_resume_never_on_a_known_id_is_a_clear_error(client, server, tmp_path):
    run_id = new_id()
    run_script(tmp_path, LOG, server.url, run_id, "-", "0")
    done = run_script(tmp_path, LOG, server.url, run_id, "never", "10", check=False)
    assert done.returncode == 3, done.stdout + done.stderr
    assert f"Run ({run_id}) already exists" in done.stdout
    assert steps(client, run_id) == {0: 0.0, 1: 1.0, 2: 2.0}  # nothing written


def test_resume_must_reopens_a_finished_run(client, server, tmp_path):
    run_id = new_id()
    run_script(tmp_path, LOG, server.url, run_id, "-", "0")
    run_script(tmp_path, LOG, server.url, run_id, "must", "5")
    assert sorted(steps(client, run_id)) == [0, 1, 2, 3, 4, 5]
    assert client.run(run_id)["status"] == "completed"


def test_fork_starts_from_the_parents_history_up_to_the_step(client, server, tmp_path):
    parent = new_id()
    code = """
    import sys, wandb
    run = wandb.init(project="branches", id=sys.argv[1])
    run.define_metric("acc", step_metric="epoch")
    for i in range(6):
        run.log({"loss": float(i), "epoch": i, "acc": i / 10})
    run.finish()
    """
    run_script(tmp_path, code, server.url, parent)
    fork = """
    import sys, wandb
    run = wandb.init(project="branches", fork_from=f"{sys.argv[1]}?_step=2")
    run.log({"loss": 100.0})
    print(run.id)
    run.finish()
    """
    child = run_script(tmp_path, fork, server.url, parent).stdout.split()[-1]
    assert steps(client, child) == {0: 0.0, 1: 1.0, 2: 2.0, 3: 100.0}
    assert steps(client, parent) == {i: float(i) for i in range(6)}  # the parent is untouched
    side = api(server, f"/runs/{child}/wandb")
    assert side["forked_from"] == f"{parent}?_step=2"
    keys = {k["key"]: k["step_metric"] for k in api(server, f"/runs/{child}/metrics/keys")}
    assert keys["acc"] == "epoch"  # its definitions come along


SHARED = """
import sys, time, wandb

run_id, label, primary = sys.argv[1], sys.argv[2], sys.argv[3] == "primary"
settings = wandb.Settings(
    mode="shared", x_primary=primary, x_label=label, x_update_finish_state=primary
)
run = wandb.init(project="branches", id=run_id, settings=settings)
print("ready", flush=True)
for step in range(3):
    run.log({f"{label}/loss": float(step)}, step=step)
print(f"line from {label}")
if primary:  # the worker finishes first, as prime-rl's trainer outlives its workers
    sys.stdin.readline()
run.finish()
"""


@pytest.mark.slow
def test_two_processes_in_shared_mode_write_one_run_each_labelled(client, server, tmp_path):
    run_id = new_id()
    primary = start_script(tmp_path, SHARED, server.url, run_id, "trainer", "primary")
    try:
        wait_ready(primary)
        worker_dir = tmp_path / "worker"  # another process, with its own W&B directory
        worker_dir.mkdir()
        worker = run_script(worker_dir, SHARED, server.url, run_id, "worker", "secondary")
        assert worker.returncode == 0
        assert client.run(run_id)["status"] == "running"  # a secondary writer does not close it
        primary.communicate("go\n", timeout=SCRIPT_TIMEOUT)
    finally:
        primary.kill()
        primary.communicate(timeout=SCRIPT_TIMEOUT)
    assert primary.returncode == 0
    run = client.run(run_id)
    assert run["status"] == "completed"
    assert steps(client, run_id, "trainer/loss") == {0: 0.0, 1: 1.0, 2: 2.0}
    assert steps(client, run_id, "worker/loss") == {0: 0.0, 1: 1.0, 2: 2.0}
    lines = {(line["source"], line["line"]) for line in client.logs(run_id)}
    assert ("trainer", "line from trainer") in lines
    assert ("worker", "line from worker") in lines
    system = {r["key"] for r in client.metrics(run_id) if r["step"] is None}
    assert any(k.endswith("/l:worker") for k in system)  # each writer's own system series


def test_an_offline_run_uploads_with_wandb_sync(client, server, tmp_path):
    run_id = new_id()
    code = """
    import sys, wandb
    run = wandb.init(project="offline-proj", id=sys.argv[1], config={"seed": 7})
    for i in range(4):
        run.log({"loss": 1.0 / (i + 1)})
    print("offline line")
    run.finish()
    """
    run_script(tmp_path, code, None, run_id, WANDB_MODE="offline")
    assert run_id not in {r["id"] for r in client.runs()}
    (offline_dir,) = Path(tmp_path, "wandb").glob(f"offline-run-*-{run_id}")
    wandb_cli = Path(sys.executable).with_name("wandb")
    done = subprocess.run(
        [str(wandb_cli), "sync", str(offline_dir)],
        env=wandb_env(tmp_path, server.url),
        capture_output=True,
        text=True,
        timeout=SCRIPT_TIMEOUT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    run = client.run(run_id)
    assert run["status"] == "completed" and run["project"] == "offline-proj"
    assert steps(client, run_id) == {0: 1.0, 1: 0.5, 2: 1 / 3, 3: 0.25}
    assert "seed:\n    value: 7" in run["config"]["text"]
    assert "offline line" in {line["line"] for line in client.logs(run_id)}
