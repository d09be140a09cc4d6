"""
A dense metrics upload read by Arrow's JSON reader: every row `{"step", "ts", "values"}` with
the same metric names, the shape of a training loop's logging, parsed into columns in C++ at
about twice the speed of a row at a time through orjson (metric_rows), the parse that bounds
the ingest of dense runs (docs/benchmarks.md).

    batches = dense_batches(data, chunk_points)      # None: not plainly dense
    if batches is None:
        batches = metric_batches(...)                  # the general path, which names bad lines

It only ever takes an upload that metric_rows would turn into the same points: anything else,
valid or not, is None and goes the general way, which also words every 400. Arrow's reader is
laxer than JSON in places orjson is not (NaN and Infinity, a byte-order mark, two objects on one
line), so an upload is taken only when each of its lines starts with `{` and holds one row, its
rows have no field but step, ts and values, every step is an integer in range, every row has
every name, and every value and time is a finite number. tests/unit/test_dense_rows.py checks
the two paths against each other on generated uploads, bad ones among them.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from ..spec import MAX_STEP
from .metric_rows import MAX_KEY_CHARS
from .store.metrics import MetricColumns

__all__ = ["dense_batches"]

_FIELDS = {"step", "ts", "values"}
_NUMBERS = (pa.float64(), pa.int64(), pa.bool_())
_BRACE, _NEWLINE = ord("{"), ord("\n")


def dense_batches(data: bytes, chunk_points: int) -> list[tuple[int, MetricColumns]] | None:
    """(rows, columns) of decoded NDJSON `data`, about `chunk_points` points a batch in row
    order, as metric_rows.metric_batches would store them; None when `data` is not plainly
    dense (see the module)."""
    try:
        lines = _object_lines(data)
        table = _table(data)
        if table.num_rows != lines or not {"step", "values"} <= set(table.column_names) <= _FIELDS:
            return None
        steps = _steps(table.column("step"))
        names, values = _values(table.column("values"))
        times = _times(table.column("ts")) if "ts" in table.column_names else None
    except (_NotDense, pa.ArrowException, ValueError):  # ValueError: invalid UTF-8 in a name
        return None
    per_batch = max(1, chunk_points // len(names))
    batches = []
    for start in range(0, lines, per_batch):
        end = min(start + per_batch, lines)
        stamps = times[start:end] if times is not None else None
        if stamps is not None and np.isnan(stamps).all():
            stamps = None  # as metric_rows: no row of the batch has a time
        batch = MetricColumns(names, steps[start:end], stamps, values[start:end])
        batches.append((end - start, batch))
    return batches


class _NotDense(Exception):
    """The upload is for metric_rows to parse."""


def _object_lines(data: bytes) -> int:
    """The number of lines, each of which starts with `{` (so none is blank)."""
    raw = np.frombuffer(data, np.uint8)
    if not len(raw) or raw[0] != _BRACE:
        raise _NotDense
    ends = np.flatnonzero(raw == _NEWLINE)
    inner = ends[:-1] if raw[-1] == _NEWLINE else ends
    if not (raw[inner + 1] == _BRACE).all():
        raise _NotDense
    return len(inner) + 1


def _table(data: bytes) -> pa.Table:
    """The rows as Arrow reads them, in one block (one thread: the server has the other core).
    ArrowInvalid for invalid JSON or UTF-8, a key twice in an object, a field of two types."""
    options = pa_json.ReadOptions(use_threads=False, block_size=len(data) + 1)
    # The stubs know files and paths; the reader takes Arrow's own in-memory file as well.
    return pa_json.read_json(pa.BufferReader(data), read_options=options)  # type: ignore[arg-type]


def _steps(column: pa.ChunkedArray[Any]) -> np.ndarray:
    if column.type != pa.int64() or column.null_count:
        raise _NotDense
    steps = column.to_numpy()
    if steps.min() < 0 or steps.max() > MAX_STEP:
        raise _NotDense
    return steps


def _values(column: pa.ChunkedArray[Any]) -> tuple[tuple[str, ...], np.ndarray]:
    """The names and a (rows, names) float64 matrix, when every row has every name and each
    value is a finite number (JSON's numbers and booleans, as metric_rows takes them)."""
    kind = column.type
    if not pa.types.is_struct(kind) or not kind.num_fields or column.null_count:
        raise _NotDense
    names = tuple(kind.field(i).name for i in range(kind.num_fields))  # decoded here
    if any(not name or len(name) > MAX_KEY_CHARS for name in names):
        raise _NotDense
    matrix = np.empty((len(column), len(names)), np.float64)
    for i, field in enumerate(cast(pa.StructArray, column.combine_chunks()).flatten()):
        if field.type not in _NUMBERS or field.null_count:
            raise _NotDense
        matrix[:, i] = field.to_numpy(zero_copy_only=False)
    if not np.isfinite(matrix).all():  # NaN, Infinity: literals JSON (and metric_rows) refuse
        raise _NotDense
    return names, matrix


def _times(column: pa.ChunkedArray[Any]) -> np.ndarray | None:
    """Each row's time, NaN for a row without one; None when no row has one."""
    if column.null_count == len(column):
        return None
    if column.type not in (pa.float64(), pa.int64()):
        raise _NotDense
    if column.type == pa.float64() and not pc.all(pc.is_finite(column)).as_py():
        raise _NotDense  # NaN or Infinity among the times given (nulls: rows without one)
    return column.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
