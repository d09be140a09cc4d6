"""
Who sets a run's final status, in real processes: a resume with `id=`, prime-rl's training
attach, and what an attached process hands its run's owner (its metadata, its fatal error).
"""

from __future__ import annotations

import openruns
from openruns.settings import DEFAULT_DIR

from .helpers import only_run_dir, python, records, run_json

CRASH = """
import openruns
run = openruns.init(kind="eval", name="gsm8k-eval", mode="offline")
run.log_metrics({"score": 0.5}, step=0)
print(run.id)
raise SystemExit(0)  # exits without finishing: crashed
"""


def test_a_resume_with_id_reopens_the_run_and_completes_it(tmp_path):
    first = python(CRASH, tmp_path)
    run_id = first.stdout.strip()
    run_dir = only_run_dir(tmp_path / DEFAULT_DIR)
    assert run_json(run_dir)["status"] == "crashed"
    resumed = python(
        f"""
import openruns
run = openruns.init(id={run_id!r}, mode="offline")
print(run.attached)
run.log_metrics({{"score": 0.75}}, step=1)
run.finish()
""",
        tmp_path,
    )
    assert resumed.stdout.split() == ["False"], resumed.stderr
    doc = run_json(run_dir)
    assert (doc["status"], doc["error"], doc["name"]) == ("completed", None, "gsm8k-eval")
    # Two writers (the crashed process and this one): a stream keeps each writer's order, not
    # an order between writers (their segments are named by pid, which wraps at pid_max).
    metrics = sorted(records(run_dir, "metrics"), key=lambda m: m["step"])
    assert [m["values"] for m in metrics] == [{"score": 0.5}, {"score": 0.75}]


def test_a_resumed_run_fails_like_an_owner(tmp_path):
    run_id = python(CRASH, tmp_path).stdout.strip()
    run_dir = only_run_dir(tmp_path / DEFAULT_DIR)
    proc = python(
        f"""
import openruns
with openruns.init(id={run_id!r}, mode="offline"):
    raise RuntimeError("resumed and failed")
""",
        tmp_path,
    )
    assert "RuntimeError: resumed and failed" in proc.stderr
    doc = run_json(run_dir)
    assert (doc["status"], doc["error"]) == ("failed", "RuntimeError: resumed and failed")


def test_an_id_that_does_not_exist_yet_is_created(tmp_path):
    run = openruns.init(id="chosen-by-the-caller", mode="offline", dir=tmp_path, name="fresh")
    assert not run.attached
    run.finish()
    doc = run_json(tmp_path / "chosen-by-the-caller")
    assert (doc["status"], doc["name"]) == ("completed", "fresh")


TRAIN_ATTACH = """
import os, sys, openruns
run = openruns.init(kind="train", id=os.environ["PRECREATED"], mode="offline")
print(run.attached)
run.log_metrics({"loss": 1.0}, step=0)
if sys.argv[1] == "fail":
    run.fail("RuntimeError: trainer blew up")
else:
    run.finish()
"""


def test_a_training_attach_leaves_a_failure_to_the_owner_and_completes_on_success(tmp_path):
    # A scheduler's run, in a directory the trainer reaches through `dir`; the trainer gets
    # the id the prime-rl way (init(kind="train", id=...)), from none of the run variables
    # (with OPENRUNS_RUN_ID or RUN_ID it would be an attach: ownership.decide).
    owner = openruns.init(kind="train", mode="offline", dir=tmp_path)
    run_id, run_dir = owner.id, owner.dir
    env = {
        "PRECREATED": run_id,
        "OPENRUNS_DIR": str(tmp_path),
        "OPENRUNS_RUN_ID": "",
        "RUN_ID": "",
    }
    failed = python(TRAIN_ATTACH, tmp_path, env=env, argv=["fail"])
    assert failed.stdout.split() == ["True"], failed.stderr
    assert "left to the launcher or scheduler" in failed.stderr
    assert run_json(run_dir)["status"] == "running"
    done = python(TRAIN_ATTACH, tmp_path, env=env, argv=["ok"])
    assert done.returncode == 0, done.stderr
    assert run_json(run_dir)["status"] == "completed"
    owner.finish()  # the same status again: nothing changes
    assert run_json(run_dir)["status"] == "completed"


CHILD = """
import openruns
run = openruns.init(kind="eval", name="named-by-the-child", model="child-model",
                    tags=["a", "b"], config={"lr": 0.1})
run.log_metrics({"x": 1}, step=0)
raise RuntimeError("boom")
"""


def test_an_attached_child_fills_in_metadata_and_reports_its_fatal_error(tmp_path):
    owner = openruns.init(kind="train", mode="offline", dir=tmp_path, model="owner-model")
    child = python(CHILD, tmp_path, env={"OPENRUNS_COMPONENT": "trainer"})
    assert "RuntimeError: boom" in child.stderr
    assert owner._reported_error() == "RuntimeError: boom (trainer)"
    owner.finish()
    doc = run_json(owner.dir)
    assert doc["status"] == "completed"  # the owner decides; a report is not a status
    assert doc["model"] == "owner-model"  # set by the owner: kept
    assert doc["tags"] == ["a", "b"]
    assert doc["config"]["format"] == "json"
