"""A plain metrics upload read by Arrow (server/plain_rows.py): taken only when the general path
(metric_rows over body.stream_objects) would store the very same points, and then as columns;
anything else, valid or refused there, is left to that path."""

from __future__ import annotations

import math

import numpy as np
import orjson
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from openruns.server.body import stream_objects
from openruns.server.errors import ApiError
from openruns.server.metric_rows import COLUMN_ROWS, metric_batches
from openruns.server.plain_rows import plain_batches
from openruns.server.store.metrics import MetricColumns, MetricPoints
from openruns.spec import MAX_STEP


def general(data: bytes, chunk_points: int):
    return list(metric_batches(stream_objects((data,)), chunk_points))


def stored(batches) -> dict:
    """{(name, step or ("ts", time)): (value, time)} as the batches write them in order (the
    later winning), floats by their bits (-0.0 is not 0.0 here)."""
    out = {}
    for _, batch in batches:
        if isinstance(batch, MetricColumns):
            steps = batch.steps.tolist()
            times = batch.times if batch.times is not None else [math.nan] * len(steps)
            for step, ts, row in zip(steps, list(times), batch.values.tolist(), strict=True):
                for name, value in zip(batch.names, row, strict=True):
                    out[(name, step)] = (value.hex(), None if math.isnan(ts) else ts.hex())
        else:
            for key, (value, ts) in batch.items():
                out[key] = (value.hex(), None if ts is None else ts.hex())
            for (name, ts), value in batch.by_time.items():
                out[(name, ("ts", ts))] = (value.hex(), ts.hex())
    return out


def lines(rows) -> bytes:
    return b"".join(orjson.dumps(row) + b"\n" for row in rows)


def dense(steps, names=("loss", "acc"), ts=True):
    return [
        {
            "step": s,
            **({"ts": 1.7e9 + s} if ts else {}),
            "values": {n: s + i / 8 for i, n in enumerate(names)},
        }
        for s in steps
    ]


def test_plain_rows_come_as_columns_in_chunks_and_store_what_the_general_path_stores():
    data = lines(dense(range(1000)))
    batches = plain_batches(data, chunk_points=400)
    assert batches is not None
    assert [count for count, _ in batches] == [200] * 5
    first = batches[0][1]
    assert isinstance(first, MetricColumns) and first.names == ("loss", "acc")
    assert first.steps.dtype == np.int64 and first.steps.tolist() == list(range(200))
    assert first.values.dtype == np.float64 and first.values[3].tolist() == [3.0, 3.125]
    assert first.times is not None and first.times[3] == 1.7e9 + 3
    assert stored(batches) == stored(general(data, 400))


def test_rows_without_times_have_no_time_column_and_some_times_are_nan():
    ((_, batch),) = plain_batches(lines(dense(range(COLUMN_ROWS), ts=False)), 10**6)
    assert batch.times is None
    rows = dense(range(COLUMN_ROWS))
    del rows[4]["ts"]
    rows[5]["ts"] = None
    ((_, batch),) = plain_batches(lines(rows), 10**6)
    assert np.isnan(batch.times[4:6]).all() and batch.times[6] == 1.7e9 + 6
    assert stored([(COLUMN_ROWS, batch)]) == stored(general(lines(rows), 10**6))


def test_integers_and_booleans_are_floats_and_keys_in_another_order_are_the_same_names():
    rows = dense(range(COLUMN_ROWS))
    for row in rows:
        row["values"]["n"] = row["step"] * 3  # integers throughout: an int64 column
        row["values"]["flag"] = row["step"] % 2 == 0
    rows[3]["values"] = dict(reversed(list(rows[3]["values"].items())))
    last = b'{"step":%d,"ts":5,"values":{"loss":1,"acc":2,"n":2.5,"flag":true}}' % COLUMN_ROWS
    data = lines(rows) + last
    batches = plain_batches(data, 10**6)
    assert batches is not None
    ((_, batch),) = batches
    assert batch.names == ("loss", "acc", "n", "flag")
    assert batch.values[2].tolist() == [2.0, 2.125, 6.0, 1.0] and batch.times[-1] == 5.0
    assert stored(batches) == stored(general(data, 10**6))


def test_names_left_out_of_rows_are_columns_of_the_rows_that_have_them():
    """An eval metric every third step, another name in two rows (too few for columns: loose
    points, as metric_rows has them), a row of no values: each name set present in enough rows
    in its own columns, the later row of a step winning, every row counted once."""
    rows = dense(range(300))
    for row in rows[::3]:
        row["values"]["eval/acc"] = row["step"] / 3
    rows[7]["values"] = {"loss": -1.0, "rare": 1}  # no "acc" in this row
    rows[20]["values"]["rare"] = 2
    rows[25]["values"] = {}
    rows.append({"step": 4, "ts": 9.0, "values": {"loss": -4.0, "acc": -4.0}})  # step 4 again
    data = lines(rows)
    batches = plain_batches(data, 10**6)
    assert batches is not None
    assert sum(count for count, _ in batches) == len(rows)
    shapes = {b.names: b.steps.tolist() for _, b in batches if isinstance(b, MetricColumns)}
    assert shapes[("eval/acc",)] == list(range(0, 300, 3))
    everywhere = [*range(300), 4]  # and step 4 again, last
    assert shapes[("loss",)] == [s for s in everywhere if s != 25]
    assert shapes[("acc",)] == [s for s in everywhere if s not in (7, 25)]
    (loose,) = [b for _, b in batches if isinstance(b, MetricPoints)]
    assert loose == {("rare", 7): (1.0, 1.7e9 + 7), ("rare", 20): (2.0, 1.7e9 + 20)}
    assert stored(batches) == stored(general(data, 10**6))
    assert stored(batches)[("loss", 4)] == ((-4.0).hex(), (9.0).hex())


def test_a_name_a_row_is_one_batch_of_points_not_a_batch_a_name():
    rows = [{"step": s, "values": {f"probe/{s}": s / 2}} for s in range(1000)]
    rows += dense(range(100))
    data = lines(rows)
    batches = plain_batches(data, 10**6)
    assert batches is not None
    assert [type(b).__name__ for _, b in batches] == ["MetricColumns", "MetricPoints"]
    assert len(batches[1][1]) == 1000 and sum(n for n, _ in batches) == 1100
    assert stored(batches) == stored(general(data, 10**6))


DECLINED = {
    "NaN, which JSON has not": b'{"step":1,"values":{"a":NaN}}\n',
    "Infinity": b'{"step":1,"values":{"a":-Infinity}}\n',
    "a time of NaN": b'{"step":1,"ts":NaN,"values":{"a":1}}\n',
    "a byte-order mark": b'\xef\xbb\xbf{"step":1,"values":{"a":1}}\n',
    "two objects on one line": b'{"step":1,"values":{"a":1}}{"step":2,"values":{"a":2}}\n',
    "a blank line": b'{"step":1,"values":{"a":1}}\n\n{"step":2,"values":{"a":2}}\n',
    "a line led by a space": b'{"step":1,"values":{"a":1}}\n {"step":2,"values":{"a":2}}\n',
    "a key twice": b'{"step":1,"values":{"a":1,"a":2}}\n',
    "another field": b'{"step":1,"values":{"a":1},"note":"x"}\n',
    "a null value": b'{"step":1,"values":{"a":1}}\n{"step":2,"values":{"a":null}}\n',
    "a null beside a name left out": (
        b'{"step":1,"values":{"a":1,"b":1}}\n{"step":2,"values":{"a":null}}'
    ),
    "empty values only": b'{"step":1,"values":{}}\n',
    "no values": b'{"step":1}\n',
    "a string value": b'{"step":1,"values":{"a":"high"}}\n',
    "a nested value": b'{"step":1,"values":{"a":{"b":1}}}\n',
    "a boolean among numbers": b'{"step":1,"values":{"a":true}}\n{"step":2,"values":{"a":1}}\n',
    "a float step": b'{"step":1.0,"values":{"a":1}}\n',
    "a negative step": b'{"step":-1,"values":{"a":1}}\n',
    "a step past int64": b'{"step":9223372036854775808,"values":{"a":1}}\n',
    "a null step": b'{"step":null,"ts":1,"values":{"a":1}}\n',
    "a boolean time": b'{"step":1,"ts":true,"values":{"a":1}}\n',
    "an empty name": b'{"step":1,"values":{"":1}}\n',
    "a name too long": b'{"step":1,"values":{"' + b"x" * 513 + b'":1}}\n',
    "invalid UTF-8": b'{"step":1,"values":{"\xff":1}}\n',
    "a line cut short": b'{"step":1,"values":{"a":1}}\n{"step":2,"values":{"a":',
    "an array": b"[1,2]\n",
    "nothing": b"",
}


@pytest.mark.parametrize("data", DECLINED.values(), ids=DECLINED.keys())
def test_what_is_not_plainly_dense_goes_the_general_way(data):
    assert plain_batches(data, 10**6) is None


# -- generated uploads: the two paths side by side -------------------------------------------------

NAMES = st.sampled_from(["loss", "acc", "train/reward", "é/ü", "a\u0000b", "x" * 512])
BAD_NAMES = st.sampled_from(["", "x" * 513])
FLOATS = st.floats(allow_nan=False, allow_infinity=False)
INTEGERS = st.integers(min_value=-(2**64), max_value=2**64)
NUMBERS = st.sampled_from(  # a name's values: floats, integers, both, or booleans
    [FLOATS, INTEGERS, st.one_of(FLOATS, INTEGERS), st.booleans(), st.one_of(FLOATS, st.booleans())]
)
ODD_VALUES = st.sampled_from([None, "s", [1], {"k": 1}, b"NaN", b"Infinity", b"1e400"])
STEPS = st.one_of(
    st.integers(min_value=0, max_value=50),
    st.sampled_from([MAX_STEP, MAX_STEP + 1, -1, 1.0, None, True]),
)
TIMES = st.one_of(st.none(), st.floats(0, 2e9), st.integers(0, 2**40), st.just(b"NaN"))
FLAWS = st.sampled_from(
    [None, "step", "ts", "no ts", "value", "name", "missing", "empty", "spaces", "crlf", "blank"]
    + ["bom", "two on a line", "extra", "dup"]
)


def _json(value) -> bytes:
    if isinstance(value, bytes):  # written as it is: NaN, Infinity, 1e400
        return value
    if type(value) is int:  # orjson writes no integer past 64 bits; JSON has them
        return str(value).encode()
    return orjson.dumps(value)


def _line(row: dict) -> bytes:
    parts = [b'"%s":%s' % (k.encode(), _json(v)) for k, v in row.items() if k != "values"]
    values = b",".join(orjson.dumps(k) + b":" + _json(v) for k, v in row["values"].items())
    return b"{" + b",".join([*parts, b'"values":{' + values + b"}"]) + b"}"


@st.composite
def uploads(draw) -> bytes:
    """Dense rows of one set of names (numbers of every JSON kind), then up to three flaws,
    each in a row of its own: a step, a time or a value of another kind, a bad name, a name
    left out, no values, or a twist of the row's line. Some flaws the general path takes (an
    integer time, a row without one, a name left out, spaces), others it refuses."""
    names = draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))
    count = draw(st.one_of(st.integers(1, 30), st.integers(COLUMN_ROWS, COLUMN_ROWS + 20)))
    kinds = {name: draw(NUMBERS) for name in names}
    rows = [
        {"step": i, "ts": 1.7e9 + i, "values": {n: draw(kinds[n]) for n in names}}
        for i in range(count)
    ]
    twists: dict[int, str] = {}
    for _ in range(draw(st.integers(0, 3))):
        flaw, at = draw(FLAWS), draw(st.integers(0, count - 1))
        row = rows[at]
        if flaw == "step":
            row["step"] = draw(STEPS)
        elif flaw == "ts":
            row["ts"] = draw(TIMES)
        elif flaw == "no ts":
            row.pop("ts", None)
        elif flaw == "value":
            row["values"][names[0]] = draw(ODD_VALUES)
        elif flaw == "name":
            row["values"][draw(BAD_NAMES)] = 1.0
        elif flaw == "missing":
            row["values"].pop(names[-1], None)
        elif flaw == "empty":
            row["values"] = {}
        elif flaw is not None:
            twists[at] = flaw
    out = []
    for at, row in enumerate(rows):
        line = _line(row)
        twist = twists.get(at)
        if twist == "spaces":
            line = b" " + line.replace(b",", b" , ") + b" "
        elif twist == "crlf":
            line += b"\r"
        elif twist == "blank":
            line = b"\n" + line
        elif twist == "bom":
            line = b"\xef\xbb\xbf" + line
        elif twist == "two on a line":
            line += line
        elif twist == "extra":
            line = line[:-1] + b',"note":1}'
        elif twist == "dup":
            line = line[:-2] + b',"' + names[0].encode() + b'":1}}'
        out.append(line)
    return b"\n".join(out) + draw(st.sampled_from([b"\n", b""]))


@settings(max_examples=400, deadline=None)
@given(data=uploads(), chunk_points=st.integers(1, 200))
def test_a_taken_upload_stores_what_the_general_path_stores(data, chunk_points):
    fast = plain_batches(data, chunk_points)
    try:
        slow = general(data, chunk_points)
    except ApiError:
        event("refused by the general path")
        assert fast is None, "taken, though the general path refuses it"
        return
    event("declined" if fast is None else "taken")
    if fast is not None:
        assert sum(count for count, _ in fast) == sum(count for count, _ in slow)
        assert stored(fast) == stored(slow)
