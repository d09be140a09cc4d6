"""A parse worker's upload (server/parse_workers.py `_parse`): measured in the pass that decodes
it as the server's survey measures it (the same figures, the same refusals; past the worker's
own bound, handed back); plain rows are not cut into the server's `metric_chunk_points` (the
batches are held whole anyway, and a dense upload written as one batch writes each of its
4096-step chunks once); the general path's batches end at chunk ends, and it gives loose points
up past the worker's bound without reading on."""

from __future__ import annotations

import numpy as np
import orjson
import zstandard

from openruns.server.body import DecodeLimits, survey
from openruns.server.parse_workers import MAX_BYTES, MAX_LOOSE_POINTS, _parse, _Refusal
from openruns.server.store.metrics import MetricColumns

LIMITS = DecodeLimits(1 << 30)  # the server's defaults: 1 GiB decoded, 1,000,000 lines

NAMES = tuple(f"m{i:02d}" for i in range(20))


def upload(steps: range, indent: bytes = b"") -> tuple[bytes, int]:
    rows = (
        {"step": s, "ts": 1.7e9 + s, "values": {n: s + i / 8 for i, n in enumerate(NAMES)}}
        for s in steps
    )
    data = b"".join(indent + orjson.dumps(row) + b"\n" for row in rows)
    return zstandard.compress(data), len(data)


def batches(body: bytes, limits: DecodeLimits = LIMITS) -> list:
    parsed = _parse(body, "zstd", limits)
    assert isinstance(parsed, tuple) and not isinstance(parsed, _Refusal), parsed
    return parsed[1]


def test_the_worker_measures_the_body_as_the_servers_survey_does():
    body, size = upload(range(3_000))
    parsed = _parse(body, "zstd", LIMITS)
    assert isinstance(parsed, tuple) and not isinstance(parsed, _Refusal)
    assert parsed[0] == survey(body, "zstd", LIMITS)
    assert (parsed[0].size, parsed[0].lines) == (size, 3_000)


def test_past_the_workers_bound_an_upload_is_handed_back_and_past_the_servers_refused():
    # 33 MiB of lines of spaces: within the server's 1 GiB, past a worker's 32 MiB.
    line = b" " * 1023 + b"\n"
    body = zstandard.compress(line * (33 * 1024))
    assert _parse(body, "zstd", LIMITS) is None
    refusal = _parse(body, "zstd", DecodeLimits(16 << 20))
    assert isinstance(refusal, _Refusal)
    assert (refusal.status, refusal.code) == (413, "decompressed_body_too_large")
    assert MAX_BYTES > 16 << 20
    lines = _parse(zstandard.compress(b"\n" * 2_000), "zstd", DecodeLimits(1 << 30, 1_000))
    assert isinstance(lines, _Refusal)
    assert (lines.status, lines.code) == (413, "too_many_lines")


def test_a_dense_upload_past_the_servers_chunk_is_one_batch():
    # 10,000 rows x 20 names: 200,000 points, four times the server's default chunk.
    body, _ = upload(range(10_000))
    parsed = batches(body)
    assert len(parsed) == 1
    rows, batch = parsed[0]
    assert rows == 10_000 and isinstance(batch, MetricColumns)
    assert batch.names == NAMES and batch.values.shape == (10_000, 20)
    assert np.array_equal(batch.steps, np.arange(10_000))
    assert batch.values[1234, 3] == 1234 + 3 / 8


def test_an_upload_arrow_declines_is_cut_at_chunk_ends():
    # Lines that start with a space are valid NDJSON that only the general path takes. It
    # yields every 50,000 points (so a worker gives up on loose points in time), and its
    # columns are regrouped to end where a 4096-step chunk ends.
    body, _ = upload(range(5_000), indent=b" ")
    parsed = batches(body)
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
    assert _parse(zstandard.compress(data), "zstd", LIMITS) is None
    # The same bad line within the bound is refused, naming it.
    short = b"".join(orjson.dumps(row) + b"\n" for row in rows[:1000]) + b"{not json\n"
    refusal = _parse(zstandard.compress(short), "zstd", LIMITS)
    assert isinstance(refusal, _Refusal)
    assert refusal.status == 400 and "line 1001" in refusal.message
