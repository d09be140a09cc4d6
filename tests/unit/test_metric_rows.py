"""The rows of a metrics upload gathered into batches (server/metric_rows.py): rows sharing
their names become columns, every other row a dict of points, in row order, with the bad line
named whichever way its rows were gathered."""

from __future__ import annotations

import numpy as np
import pytest

from openruns.server.errors import ApiError
from openruns.server.metric_rows import COLUMN_ROWS, metric_batches
from openruns.server.store.metrics import MetricColumns


def numbered(rows):
    return list(enumerate(rows, start=1))


def dense(steps, names=("loss", "acc"), ts=True):
    """Rows of `names` at `steps`: name i of step s has the value s + i."""
    rows = []
    for s in steps:
        values = {name: s + i for i, name in enumerate(names)}
        rows.append({"step": s, "ts": 1e9 + s if ts else None, "values": values})
    return rows


def points_of(batches):
    """{(name, step): value} of batches written in order (the later winning)."""
    out = {}
    for _, batch in batches:
        if isinstance(batch, MetricColumns):
            for i, step in enumerate(batch.steps.tolist()):
                for j, name in enumerate(batch.names):
                    out[(name, step)] = float(batch.values[i, j])
        else:
            out.update((key, value) for key, (value, _) in batch.items())
    return out


def test_rows_sharing_their_names_come_as_columns_between_loose_rows_in_order():
    rows = dense(range(100))
    rows.append({"step": None, "ts": 5.0, "values": {"gpu": 1}})  # by time: a loose row
    rows += dense(range(100, 110))  # too few to be columns
    rows += dense(range(50, 150), names=("loss",))  # other names: their own columns
    batches = list(metric_batches(numbered(rows), chunk_points=10**6))
    kinds = [(type(batch).__name__, count) for count, batch in batches]
    assert kinds == [("MetricColumns", 100), ("MetricPoints", 11), ("MetricColumns", 100)]
    assert sum(count for count, _ in batches) == len(rows)
    first = batches[0][1]
    assert first.names == ("loss", "acc") and first.steps.tolist() == list(range(100))
    assert first.values.dtype == np.float64 and first.times.tolist() == [
        1e9 + s for s in range(100)
    ]
    assert batches[1][1].by_time == {("gpu", 5.0): 1.0}
    got = points_of(batches)
    assert got[("loss", 60)] == 60.0 and got[("acc", 60)] == 61.0  # written over by the third


def test_a_chunk_is_cut_within_a_run_of_alike_rows():
    batches = list(metric_batches(numbered(dense(range(1000))), chunk_points=400))
    assert [count for count, _ in batches] == [200] * 5
    assert all(isinstance(batch, MetricColumns) for _, batch in batches)
    assert points_of(batches) == {
        (n, s): s + i for s in range(1000) for i, n in enumerate(("loss", "acc"))
    }


def test_rows_without_times_have_no_time_column():
    ((_, batch),) = metric_batches(numbered(dense(range(COLUMN_ROWS), ts=False)), 10**6)
    assert isinstance(batch, MetricColumns) and batch.times is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("high", "values['acc'] must be a number, got 'high'"),
        (None, "values['acc'] must be a number, got None"),
        ([1.0], "values['acc'] must be a number, got [1.0]"),
        ({"x": 1}, "values['acc'] must be a number, got {'x': 1}"),
    ],
)
def test_a_bad_value_inside_a_run_of_alike_rows_names_its_line(value, message):
    rows = dense(range(300))
    rows[149]["values"]["acc"] = value
    with pytest.raises(ApiError) as raised:
        list(metric_batches(numbered(rows), chunk_points=10**6))
    assert raised.value.status_code == 400 and raised.value.message == f"line 150: {message}"


def test_numbers_of_every_json_kind_are_floats():
    rows = dense(range(COLUMN_ROWS))
    rows[3]["values"]["loss"] = True
    rows[4]["values"]["loss"] = 2**63  # past int64: as float(value)
    rows[5]["values"]["loss"] = -7
    ((_, batch),) = metric_batches(numbered(rows), 10**6)
    assert isinstance(batch, MetricColumns)
    assert batch.values[3:6, 0].tolist() == [1.0, float(2**63), -7.0]


def test_a_row_of_other_names_or_a_bad_step_is_parsed_on_its_own():
    rows = dense(range(COLUMN_ROWS)) + [{"step": -1, "values": {"loss": 1.0}}]
    with pytest.raises(ApiError) as raised:
        list(metric_batches(numbered(rows), 10**6))
    assert raised.value.message.startswith(f"line {COLUMN_ROWS + 1}: step must be")
    loose = [{"step": 1, "values": {}}, {"step": 2, "values": {"x" * 600: 1.0}}]
    with pytest.raises(ApiError) as raised:
        list(metric_batches(numbered(loose), 10**6))
    assert raised.value.message == "line 2: metric names must have 1 to 512 characters"
