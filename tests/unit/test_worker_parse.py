"""A parse worker's upload (server/parse_workers.py `_parse`) is not cut into the server's
`metric_chunk_points`: its batches are held whole anyway, and a dense upload written as one
batch writes each of its 4096-step chunks once."""

from __future__ import annotations

import numpy as np
import orjson
import zstandard

from openruns.server.parse_workers import _parse
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


def test_an_upload_arrow_declines_is_one_batch_as_well():
    # Lines that start with a space are valid NDJSON that only the general path takes.
    body, size = upload(range(5_000), indent=b" ")
    parsed = _parse(body, "zstd", size)
    assert isinstance(parsed, list) and len(parsed) == 1
    rows, batch = parsed[0]
    assert rows == 5_000 and isinstance(batch, MetricColumns)
    assert batch.values.shape == (5_000, 20)
