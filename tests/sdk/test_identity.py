"""Who owns a run and who attaches: exported ids, pids, ranks, explicit ids."""

from __future__ import annotations

import os

import pytest

import openruns
from openruns.identity import new_run_id
from openruns.settings import DEFAULT_DIR

from .helpers import python, records, run_json


def test_init_exports_the_run_with_the_owner_pid(tmp_path):
    run = openruns.init(mode="offline", dir=tmp_path)
    assert os.environ["OPENRUNS_RUN_ID"] == run.id
    assert os.environ["RUN_ID"] == run.id
    assert os.environ["OPENRUNS_RUN_PID"] == str(os.getpid())
    run.finish()
    assert "OPENRUNS_RUN_ID" not in os.environ  # the owner stops advertising a finished run
    assert "RUN_ID" not in os.environ


def test_the_same_pid_on_another_host_attaches(tmp_path, monkeypatch):
    from openruns.identity import inherited_run

    owner = openruns.init(mode="offline", dir=tmp_path)
    assert inherited_run() is None  # our own export
    monkeypatch.setenv("OPENRUNS_RUN_HOST", "another-node")  # e.g. pid 1 in two containers
    assert inherited_run().id == owner.id
    owner.finish()


def test_second_init_in_the_same_process_opens_a_new_run(tmp_path):
    first = openruns.init(mode="offline", dir=tmp_path)
    second = openruns.init(mode="offline", dir=tmp_path)
    assert second.id != first.id
    assert not second.attached
    second.finish()
    first.finish()
    assert run_json(first.dir)["status"] == "completed"
    assert run_json(second.dir)["status"] == "completed"


def test_child_process_attaches_and_cannot_finish(tmp_path):
    run = openruns.init(kind="train", mode="offline", dir=tmp_path)
    child = python(
        """
import openruns
run = openruns.init(kind="eval", mode="offline")
print(run.id, run.attached, run.kind)
run.log_metrics({"child": 1.0}, step=3)
run.log_episodes([{"id": "from-child", "traces": []}])
run.fail("child says failed")  # attached: only flushes
""",
        tmp_path,
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == [run.id, "True", "train"]
    assert run_json(run.dir)["status"] == "running"
    run.log_metrics({"parent": 1.0}, step=4)
    run.finish()
    assert run_json(run.dir)["status"] == "completed"
    assert {r["step"] for r in records(run.dir, "metrics")} == {3, 4}
    episode = records(run.dir, "episodes")[0]
    assert episode["run"] == {"id": run.id, "type": "train"}


def test_explicit_id_of_the_exported_run_attaches(tmp_path):
    run = openruns.init(kind="train", mode="offline", dir=tmp_path)
    child = python(
        """
import os, openruns
r = openruns.init(kind="train", id=os.environ["RUN_ID"], mode="offline")
print(r.id, r.attached)
r.log_metrics({"a": 1}, step=0)
r.finish()  # the id came from the environment: only a flush
""",
        tmp_path,
    )
    assert child.stdout.split() == [run.id, "True"], child.stderr
    assert run_json(run.dir)["status"] == "running"
    run.finish()
    assert records(run.dir, "metrics")[0]["values"] == {"a": 1}


def test_nonzero_rank_attaches_to_the_exported_run(tmp_path):
    run = openruns.init(mode="offline", dir=tmp_path)
    child = python(
        "import openruns\nr = openruns.init(mode='offline')\nprint(r.id, r.attached)\n",
        tmp_path,
        env={"RANK": "3"},
    )
    assert child.stdout.split() == [run.id, "True"], child.stderr
    run.finish()


@pytest.mark.parametrize("rank", ["RANK", "LOCAL_RANK", "DP_RANK"])
def test_every_rank_variable_attaches(tmp_path, rank):
    run = openruns.init(mode="offline", dir=tmp_path)
    child = python(
        """
import os, openruns
inherited = openruns.init(mode="offline")
explicit = openruns.init(id=os.environ["OPENRUNS_RUN_ID"], mode="offline")
print(inherited.attached, explicit.attached, explicit.id == inherited.id)
explicit.log_metrics({"rank_1": 1}, step=0)
explicit.finish()      # a non-zero rank never sets the status, even with id=
inherited.fail("no")   # nor without
""",
        tmp_path,
        env={rank: "1"},
    )
    assert child.stdout.split() == ["True", "True", "True"], child.stderr
    assert run_json(run.dir)["status"] == "running"
    run.finish()
    assert run_json(run.dir)["status"] == "completed"
    assert records(run.dir, "metrics")[0]["values"] == {"rank_1": 1}


def test_nonzero_rank_without_a_run_never_creates_one(tmp_path):
    child = python(
        "import openruns\nr = openruns.init(mode='offline')\nprint(r.mode, r.id)\n",
        tmp_path,
        env={"LOCAL_RANK": "1"},
    )
    assert child.returncode == 0, child.stderr
    mode, run_id = child.stdout.split()
    assert mode == "disabled" and run_id.startswith("disabled-")
    assert "LOCAL_RANK=1 has no run to attach to" in child.stderr
    assert not (tmp_path / DEFAULT_DIR).exists()


def test_rank_zero_creates(tmp_path):
    child = python(
        "import openruns\nr = openruns.init(mode='offline')\nprint(r.attached)\n",
        tmp_path,
        env={"RANK": "0", "LOCAL_RANK": "0"},
    )
    assert child.stdout.strip() == "False", child.stderr


def test_the_id_rule_accepts_what_the_server_accepts(tmp_path):
    for good in ("a", "0", "x" * 64, "job-1.retry_2", new_run_id()):
        run = openruns.init(id=good, mode="offline", dir=tmp_path)
        run.finish()
        assert run.id == good
