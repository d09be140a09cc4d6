"""run.alert and the NaN report on the SDK side: an offline run keeps them in its `alerts`
stream (sync sends them later, as the online lane does at once); bad arguments are named."""

from __future__ import annotations

import pytest

import openruns
from openruns.errors import RunFinishedError

from .helpers import records


def test_alerts_and_first_nan_per_key_are_written(tmp_path):
    run = openruns.init(kind="train", name="r", mode="offline", dir=tmp_path)
    run.log_metrics({"loss": 1.0}, step=1)
    run.log_metrics({"loss": float("nan"), "acc": 0.5}, step=2)
    run.log_metrics({"loss": float("inf"), "grad": float("-inf")}, step=3)
    run.alert("eval regressed", "pass@1 0.41", level="warn")
    run.alert("note")
    run.finish()
    rows = records(run.dir, "alerts")
    nonfinite = [(r["metric"], r["value"], r["step"]) for r in rows if r["type"] == "nonfinite"]
    assert nonfinite == [("loss", "nan", 2), ("grad", "-inf", 3)]  # each key named once
    alerts = [(r["title"], r["text"], r["level"]) for r in rows if r["type"] == "alert"]
    assert alerts == [("eval regressed", "pass@1 0.41", "warn"), ("note", "", "info")]
    assert all(isinstance(r["ts"], float) for r in rows)
    assert run.dropped_records == 0


def test_bad_alert_arguments_are_named(tmp_path):
    run = openruns.init(kind="train", mode="offline", dir=tmp_path)
    with pytest.raises(ValueError, match="level must be one of info, warn, error"):
        run.alert("t", level="critical")
    with pytest.raises(ValueError, match="title must be a string of 1 to 200"):
        run.alert("")
    with pytest.raises(ValueError, match="text must be a string"):
        run.alert("t", 42)  # type: ignore[arg-type]
    run.finish()
    with pytest.raises(RunFinishedError, match="alert"):
        run.alert("late")
