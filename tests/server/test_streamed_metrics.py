"""Metric uploads streamed in chunks (issue 21): the stored result of any chunk size is the one
of a whole upload at once, a replay writes nothing, and a bad line stores nothing."""

from __future__ import annotations

import itertools

import orjson
import pytest

from openruns.rundir import batch_key
from openruns.server.body import iter_objects, stream_objects
from openruns.server.errors import ApiError
from openruns.server.metric_rows import metric_batches

from .helpers import api, create_run, error_of, upload


def _rows() -> bytes:
    """400 rows: two keys by step (a step repeated, later value winning), a key every 7th
    step, blank lines, and time-keyed rows."""
    out = []
    for step in range(300):
        values = {"loss": 1.0 / (step + 1), "acc": step / 300}
        if step % 7 == 0:
            values["rare"] = float(step)
        out.append({"step": step, "ts": 1.0e9 + step, "values": values})
        if step % 50 == 0:
            out.append({"step": max(0, step - 3), "ts": 2.0e9, "values": {"loss": -1.0}})
    for i in range(94):
        out.append({"step": None, "ts": 3.0e9 + i, "values": {"inference/lag": float(i)}})
    lines = [orjson.dumps(row) for row in out]
    return b"\n".join(lines[:5] + [b"", b"  "] + lines[5:]) + b"\n"


def _stored(http, rid: str) -> dict:
    keys = http.get(f"/runs/{rid}/metrics/keys").json()
    full = http.get(f"/runs/{rid}/metrics", params={"max_points": 0}).json()
    # A downsampled read comes from the block summaries: they must be the same too.
    coarse = http.get(f"/runs/{rid}/metrics", params={"max_points": 20}).json()
    return {"keys": keys, "full": full, "coarse": coarse}


def test_any_chunk_size_stores_what_one_chunk_stores(make_server):
    data = _rows()
    results = []
    for chunk in (1_000_000, 7, 1):
        with api(make_server(metric_chunk_points=chunk).url) as http:
            rid = create_run(http, id="run-streamed")["id"]
            receipt = upload(http, rid, "metrics", data)
            assert receipt.status_code == 200, receipt.text
            expected = {"status": "committed", "rows": 400, "receipt": batch_key(data)}
            assert receipt.json() == expected
            # A replay answers the first receipt and writes nothing.
            assert upload(http, rid, "metrics", data).json() == receipt.json()
            results.append(_stored(http, rid))
    assert results[0] == results[1] == results[2]
    loss = results[0]["full"]["series"]["loss"]
    # The later row of a step wins: step 0's second row, and step 47 rewritten after step 50.
    assert loss["value"][:2] == [-1.0, 0.5] and loss["value"][47:49] == [-1.0, 1 / 49]


def test_a_bad_line_after_written_chunks_stores_nothing(make_server):
    with api(make_server(metric_chunk_points=5).url) as http:
        rid = create_run(http)["id"]
        good = b"".join(b'{"step": %d, "values": {"loss": 1}}\n' % s for s in range(40))
        bad = good + b'{"step": 40, "values": {"loss": "high"}}\n'
        status, code, message = error_of(upload(http, rid, "metrics", bad))
        assert (status, code) == (400, "invalid_metrics") and message.startswith("line 41:")
        assert http.get(f"/runs/{rid}/metrics/keys").json() == []
        # Nothing of it stood: its key was not spent, the good rows go in after.
        assert upload(http, rid, "metrics", good).json()["rows"] == 40
        assert http.get(f"/runs/{rid}/metrics/keys").json()[0]["count"] == 40


def test_chunks_are_cut_as_rows_are_read():
    """The parser holds one chunk of rows, never the upload: the first chunk is out before
    more rows than it holds were read."""
    read = 0

    def rows():
        nonlocal read
        for step in itertools.count():
            read += 1
            yield step + 1, {"step": step, "values": {"a": 1.0, "b": 2.0}}

    chunks = metric_batches(rows(), chunk_points=10)
    first_rows, first = next(chunks)
    assert (first_rows, len(first), read) == (5, 10, 5)
    second_rows, second = next(chunks)
    assert (second_rows, read) == (5, 10) and min(step for _, step in second) == 5


@pytest.mark.parametrize("size", [1, 2, 3, 17, 10_000])
def test_stream_objects_reads_lines_across_pieces(size):
    data = _rows()
    pieces = [data[i : i + size] for i in range(0, len(data), size)]
    assert list(stream_objects(pieces)) == [(n, obj) for n, _, _, obj in iter_objects(data)]
    broken = data.replace(b'"acc"', b"acc", 1)
    with pytest.raises(ApiError) as whole:
        list(iter_objects(broken))
    pieces = [broken[i : i + size] for i in range(0, len(broken), size)]
    with pytest.raises(ApiError) as streamed:
        list(stream_objects(pieces))
    assert streamed.value.detail == whole.value.detail
