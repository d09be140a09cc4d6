"""A real os.fork(): the child joins the parent's run; nothing is written twice or lost."""

from __future__ import annotations

import os

import openruns

from .helpers import records, run_json


def _wait(pid: int) -> int:
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_forked_child_joins_the_run_and_nothing_is_written_twice(tmp_path):
    run = openruns.init(kind="train", mode="offline", dir=tmp_path)
    for i in range(500):
        run.log_episodes([{"id": f"parent-{i}", "traces": []}], step=i)
    # Fork with records still queued in the parent: the child must not write them again.
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            assert run.attached
            for i in range(300):
                run.log_episodes([{"id": f"child-{i}", "traces": []}], step=i)
            run.finish()  # attached: flush only
            code = 0 if run.dropped_records == 0 and not run.failed_records else 2
        finally:
            os._exit(code)
    assert _wait(pid) == 0
    assert run_json(run.dir)["status"] == "running"  # the child could not finish it
    for i in range(200):
        run.log_episodes([{"id": f"parent-late-{i}", "traces": []}], step=i)
    run.finish()
    ids = [r["id"] for r in records(run.dir, "episodes")]
    assert len(ids) == len(set(ids)) == 1000
    assert sum(i.startswith("child-") for i in ids) == 300
    assert run_json(run.dir)["status"] == "completed"
    writers = sorted(p.name for p in (run.dir / "writers").iterdir())
    assert len(writers) == 2  # the child wrote its own segments and its own loss record


def test_fork_while_a_producer_lock_is_held_does_not_deadlock_the_child(tmp_path):
    run = openruns.init(mode="offline", dir=tmp_path)
    run.log_metrics({"a": 1}, step=0)
    queue_lock = run._pipeline._lanes["metrics"].queue._lock
    queue_lock.acquire()  # as if another thread were inside log_metrics at fork time
    try:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                run.log_metrics({"child": 1}, step=1)
                code = 0 if run.flush(timeout=10) else 3
            finally:
                os._exit(code)
    finally:
        queue_lock.release()
    assert _wait(pid) == 0
    run.finish()
    assert sorted(r["step"] for r in records(run.dir, "metrics")) == [0, 1]


def test_forked_child_exit_via_multiprocessing_flushes(tmp_path):
    import multiprocessing

    run = openruns.init(mode="offline", dir=tmp_path)

    def work():
        run.log_metrics({"from_child": 1.0}, step=9)  # no flush: the exit finalizer does it

    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=work)
    proc.start()
    proc.join(30)
    assert proc.exitcode == 0
    run.finish()
    assert [r["step"] for r in records(run.dir, "metrics")] == [9]
    assert openruns.RunStatus(run_json(run.dir)["status"]) is openruns.RunStatus.COMPLETED
