"""A parse worker's upload (server/parse_workers.py `_parse`): plain rows are not cut into the
server's `metric_chunk_points` (the batches are held whole anyway, and a dense upload written as
one batch writes each of its 4096-step chunks once); the general path's batches end at chunk
ends, and it gives loose points up past the worker's bound without reading on."""

from __future__ import annotations

import numpy as np
import orjson
import zstandard

from openruns.server.parse_workers import MAX_LOOSE_POINTS, _parse
from openruns.server.store.metrics import MetricColumns

NAMES = tuple(f"m{i:02d}" for i in range(20))


def upload(steps: range, indent: bytes = b"") -> tuple[bytes, int]:
    rows = (
        {"step": s, "ts": 1.7e9 + s, "values": {n: s + i / 8 for i, n in enumerate(NAMES)}}
        for s in steps
    )
    data = b"".join(indent + orjson.dumps(row) + b"\n" for row in rows)
    return zstandard.compress(data), len(data)


def test_a_dense_upload_past_the_servers_chunk_is_one_batch():
    # 10,000 rows x 20 names: 200,000 points, four times the server's default chunk.
    body, size = upload(range(10_000))
    parsed = _parse(body, "zstd", size)
    assert isinstance(parsed, list) and len(parsed) == 1
    rows, batch = parsed[0]
    assert rows == 10_000 and isinstance(batch, MetricColumns)
    assert batch.names == NAMES and batch.values.shape == (10_000, 20)
    assert np.array_equal(batch.steps, np.arange(10_000))
    assert batch.values[1234, 3] == 1234 + 3 / 8


def test_an_upload_arrow_declines_is_cut_at_chunk_ends():
    # Lines that start with a space are valid NDJSON that only the general path takes. It
    # yields every 50,000 points (so a worker gives up on loose points in time), and its
    # columns are regrouped to end where a 4096-step chunk ends.
    body, size = upload(range(5_000), indent=b" ")
    parsed = _parse(body, "zstd", size)
    assert isinstance(parsed, list)
    assert [(rows, b.steps[0], b.steps[-1]) for rows, b in parsed] == [
        (5_000, 0, 4_095),
        (0, 4_096, 4_999),
    ]
    assert all(isinstance(b, MetricColumns) and b.values.shape[1] == 20 for _, b in parsed)


def test_loose_points_are_given_up_before_the_rest_of_the_upload_is_read():
    # Rows without a step are time-keyed loose points, which only the general path takes. Past
    # MAX_LOOSE_POINTS the worker hands the upload back (None: the server parses it itself)
    # without reading on: the bad line at the end is never reached, so a worker never holds
    # more than MAX_LOOSE_POINTS and one batch of loose points, whatever the upload's size.
    rows = [{"step": None, "ts": 1.7e9 + i, "values": {"a": i}} for i in range(160_000)]
    data = b"".join(orjson.dumps(row) + b"\n" for row in rows) + b"{not json\n"
    assert MAX_LOOSE_POINTS < 160_000
    assert _parse(zstandard.compress(data), "zstd", len(data)) is None
    # The same bad line within the bound is refused, naming it.
    short = b"".join(orjson.dumps(row) + b"\n" for row in rows[:1000]) + b"{not json\n"
    refusal = _parse(zstandard.compress(short), "zstd", len(short))
    assert refusal is not None and not isinstance(refusal, list)
    assert refusal.status == 400 and "line 1001" in refusal.message
