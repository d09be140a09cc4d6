"""An offline run is a real run: everything logged is on disk, in the documented format."""

from __future__ import annotations

import copy
import logging
import shutil
import subprocess
import threading
import time

import orjson
import pytest

import openruns
from openruns.rundir import read_index, read_record, segment_paths

from ..unit.test_records import VerifiersLike
from .helpers import records, run_json


def _episode(i: int, step: int | None = None) -> dict:
    episode = {
        "id": f"e{i}",
        "env": {"id": "math"},
        "ok": i % 2 == 0,
        "traces": [{"id": f"t{i}", "reward": i / 10, "nodes": [{"m": "x" * 50}] * (i % 7 + 1)}],
    }
    if step is not None:
        episode["run"] = {"type": "train", "work": {"type": "train", "step": step}}
    return episode


def test_everything_logged_is_written(tmp_path):
    run = openruns.init(kind="train", name="r", model="m", tags=["a"], mode="offline", dir=tmp_path)
    for step in range(50):
        run.log_metrics({"loss": 1 / (step + 1), "eval": {"acc": step / 50}}, step=step)
    run.log_episodes([_episode(i, step=i % 5) for i in range(40)])
    run.log_traces([{"id": "bare", "reward": 0.5}], step=7)
    run.update_summary({"best": 0.9})
    run.finish({"final": 1.0})

    metrics = records(run.dir, "metrics")
    assert [m["step"] for m in metrics] == list(range(50))
    assert metrics[3]["values"] == {"loss": 0.25, "eval/acc": 3 / 50}
    assert [e["id"] for e in records(run.dir, "episodes")] == [f"e{i}" for i in range(40)]
    traces = records(run.dir, "traces")
    assert traces == [
        {"id": "bare", "reward": 0.5, "run": {"id": run.id, "type": "train"}, "step": 7}
    ]

    doc = run_json(run.dir)
    assert doc["status"] == "completed"
    assert doc["summary"] == {"best": 0.9, "final": 1.0}
    assert doc["name"] == "r" and doc["tags"] == ["a"] and doc["kind"] == "train"
    assert doc["losses"] == {"dropped_records": 0, "failed_records": {}}
    assert all(p.name.endswith(".ndjson.zst") for p in segment_paths(run.dir / "episodes"))


def test_episode_index_points_at_each_record(tmp_path):
    run = openruns.init(mode="offline", dir=tmp_path)
    run.log_metrics({"x": 1}, step=3)
    run.log_episodes([_episode(i) for i in range(20)])  # no step of their own: the run's step
    run.log_episodes([_episode(99, step=8)], step=2)  # an explicit step wins
    run.finish()
    rows = read_index(run.dir, "episodes")
    assert len(rows) == 21
    for row in rows:
        record = read_record(run.dir, "episodes", row)
        assert record["id"] == row["id"]
    by_id = {r["id"]: r for r in rows}
    assert by_id["e4"]["step"] == 3 and by_id["e4"]["env"] == "math" and by_id["e4"]["ok"] is True
    assert by_id["e4"]["reward"] == 0.4
    assert by_id["e99"]["step"] == 8  # run.work.step is the dispatch step: it is kept


def test_segments_are_readable_with_zstd_cli(tmp_path):
    if shutil.which("zstd") is None:
        pytest.fail("the zstd command is required (scripts/test installs Debian's zstd)")
    run = openruns.init(mode="offline", dir=tmp_path)
    run.log_episodes([_episode(i) for i in range(5)])
    run.flush()
    run.log_episodes([_episode(i) for i in range(5, 8)])
    run.finish()
    ids = []
    for path in segment_paths(run.dir / "episodes"):
        out = subprocess.run(["zstd", "-dc", str(path)], capture_output=True, check=True).stdout
        ids += [orjson.loads(line)["id"] for line in out.splitlines()]
    assert ids == [f"e{i}" for i in range(8)]


def test_producer_objects_are_built_lazily_and_never_mutated(tmp_path):
    objects = [VerifiersLike(_episode(i)) for i in range(5)]
    snapshots = [copy.deepcopy(o._record) for o in objects]
    run = openruns.init(mode="offline", dir=tmp_path)
    run.log_episodes(objects)
    run.finish()
    assert [o.calls for o in objects] == [1] * 5
    assert [o._record for o in objects] == snapshots
    assert records(run.dir, "episodes")[0]["run"] == {"id": run.id, "type": "eval"}


def test_non_finite_metrics_are_dropped_and_named_once(tmp_path, caplog):
    run = openruns.init(mode="offline", dir=tmp_path)
    with caplog.at_level(logging.WARNING, logger="openruns"):
        for step in range(5):
            run.log_metrics({"loss": float("nan"), "ok": 1.0}, step=step)
        run.finish()
    warnings = [r.getMessage() for r in caplog.records if "not finite" in r.getMessage()]
    assert len(warnings) == 1 and "loss (nan)" in warnings[0]
    assert [m["values"] for m in records(run.dir, "metrics")] == [{"ok": 1.0}] * 5


def test_repeated_and_out_of_order_steps_are_kept(tmp_path):
    run = openruns.init(mode="offline", dir=tmp_path)
    for step in (5, 3, 3, 9):
        run.log_metrics({"x": step}, step=step)
    before = time.time()
    run.log_metrics({"lag": 0.01})  # no step: a row keyed by its time, not step 10
    run.finish()
    rows = records(run.dir, "metrics")
    assert [m["step"] for m in rows] == [5, 3, 3, 9, None]
    assert rows[-1]["ts"] >= before and rows[-1]["values"] == {"lag": 0.01}


def test_what_is_not_a_record_is_counted_not_fatal(tmp_path):
    run = openruns.init(mode="offline", dir=tmp_path)
    run.log_episodes([{"id": "ok-1", "traces": []}, 42, "text"])
    run.log_episodes([{"id": "ok-2", "traces": []}])
    run.finish()
    assert run.failed_records == {"encode": 2}
    assert len(run.errors) == 2 and "TypeError" in run.errors[0]
    assert [e["id"] for e in records(run.dir, "episodes")] == ["ok-1", "ok-2"]
    assert run_json(run.dir)["losses"]["failed_records"] == {"encode": 2}


def test_on_error_raise_reraises_at_flush(tmp_path):
    run = openruns.init(mode="offline", dir=tmp_path, on_error="raise")
    run.log_episodes([object()])
    with pytest.raises(TypeError, match="to_record"):
        run.flush()
    run.finish()  # raised once; the run still closes
    assert run_json(run.dir)["status"] == "completed"


def _stall(run, gate: threading.Event):
    """Keep the encoder threads from taking anything until `gate` is set: they wait on it (a
    take that answered nothing would be asked again at once, and its thread would spin, a core
    busy for the rest of the test process, if the gate is never set)."""
    for lane in run._pipeline._lanes.values():
        original = lane.queue.take_all
        lane.queue.take_all = lambda original=original: (gate.wait(), original())[1]


def test_a_full_queue_drops_counts_and_warns_once_per_burst(tmp_path, caplog):
    run = openruns.init(mode="offline", dir=tmp_path)
    for lane in run._pipeline._lanes.values():
        lane.queue.max_records = 10
    gate = threading.Event()
    _stall(run, gate)
    with caplog.at_level(logging.WARNING, logger="openruns"):
        run.log_episodes([_episode(i) for i in range(8)])
        run.log_episodes([_episode(i) for i in range(8, 11)])  # 3 more would pass 10: dropped
        run.log_traces([{"id": "t"}])  # fits: the burst ends
        run.log_episodes([_episode(i) for i in range(5)])  # dropped: a second burst
        for step in range(12):  # metrics have their own lane and bound: the last 2 are dropped
            run.log_metrics({"x": step}, step=step)
        gate.set()
        run.finish()
    assert run.dropped_records == 10
    full = [r for r in caplog.records if "queue full" in r.getMessage()]
    assert len(full) == 3
    assert len(records(run.dir, "episodes")) == 8
    assert [m["step"] for m in records(run.dir, "metrics")] == list(range(10))
    assert run_json(run.dir)["losses"]["dropped_records"] == 10


def test_finish_deadline_counts_what_was_not_written(tmp_path):
    run = openruns.init(mode="offline", dir=tmp_path)
    gate = threading.Event()
    _stall(run, gate)  # a stuck upload
    try:
        run.log_episodes([_episode(i) for i in range(3)])
        run.log_metrics({"x": 1})
        run.finish(timeout=0.3)
        assert run.dropped_records == 4
        assert run_json(run.dir)["losses"]["dropped_records"] == 4
    finally:
        gate.set()  # the stuck threads end


def test_disabled_runs_accept_and_discard(tmp_path):
    run = openruns.init(mode="disabled", dir=tmp_path)
    assert run.id.startswith("disabled-") and run.url is None
    run.log_metrics({"x": 1})
    run.log_episodes([_episode(1)])
    run.finish()
    assert run.status is openruns.RunStatus.COMPLETED
    assert not any(tmp_path.iterdir())
    with pytest.raises(openruns.RunFinishedError):
        run.log_metrics({"x": 1})


def test_argument_errors_name_the_argument(tmp_path):
    run = openruns.init(mode="offline", dir=tmp_path)
    with pytest.raises(TypeError, match="values must be a mapping"):
        run.log_metrics([1, 2])
    with pytest.raises(TypeError, match="step must be an int"):
        run.log_metrics({"x": 1}, step="3")
    for out_of_range in (-1, 2**63):  # the server would refuse the batch the row travels in
        with pytest.raises(ValueError, match="step must be from 0 to"):
            run.log_metrics({"x": 1}, step=out_of_range)
        with pytest.raises(ValueError, match="step must be from 0 to"):
            run.log_episodes([_episode(1)], step=out_of_range)
    with pytest.raises(TypeError, match="iterable of records"):
        run.log_episodes({"id": "not-a-list"})
    with pytest.raises(ValueError, match="terminal status"):
        run.finish(status="running")
    run.finish()


def test_concurrent_finish_waits_for_the_first(tmp_path):
    run = openruns.init(mode="offline", dir=tmp_path)
    run.log_episodes([_episode(i) for i in range(100)])
    threads = [threading.Thread(target=run.finish) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert run_json(run.dir)["status"] == "completed"
    assert len(records(run.dir, "episodes")) == 100


def test_fail_records_the_exception(tmp_path):
    run = openruns.init(mode="offline", dir=tmp_path)
    run.fail(RuntimeError("diverged"))
    doc = run_json(run.dir)
    assert (doc["status"], doc["error"]) == ("failed", "RuntimeError: diverged")
    assert doc["finished_at"] >= doc["created_at"]


def test_deep_copies_are_not_needed_for_metrics(tmp_path):
    run = openruns.init(mode="offline", dir=tmp_path)
    values = {"a": 1}
    run.log_metrics(values, step=0)
    values["a"] = 2  # the call took a shallow copy
    run.finish()
    assert records(run.dir, "metrics")[0]["values"] == {"a": 1}


def test_another_status_asked_after_the_finish_is_warned_about_and_ignored(tmp_path, caplog):
    run = openruns.init(kind="eval", mode="offline", dir=tmp_path)
    run.finish()
    with caplog.at_level(logging.WARNING, logger="openruns"):
        run.finish(status="failed", error="too late")
        run.finish()  # the same status again: nothing to say
    warned = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
    assert warned == [
        f"openruns: run {run.id} is already completed; finish(status='failed') is ignored"
    ]
    assert run_json(run.dir)["status"] == "completed"


def test_a_with_block_that_failed_its_run_keeps_that_status_without_a_warning(tmp_path, caplog):
    with (
        caplog.at_level(logging.WARNING, logger="openruns"),
        openruns.init(kind="eval", mode="offline", dir=tmp_path) as run,
    ):
        run.fail("ValueError: bad data")
    assert not [r for r in caplog.records if "ignored" in r.getMessage()]
    assert run_json(run.dir)["status"] == "failed"
