"""
A plain metrics upload read by Arrow's JSON reader: rows `{"step", "ts", "values"}` of numbers,
the shape of a training loop's logging, parsed into columns in C++: about twice as fast as a
row at a time through orjson (metric_rows) for rows of the same names, and two and a half times
for rows that leave some out (an eval metric every tenth step: metric_rows makes each of those
rows loose points). The parse bounded the ingest of dense runs (docs/benchmarks.md).

    batches = plain_batches(data, chunk_points)      # None: not plain
    if batches is None:
        batches = metric_batches(...)                  # the general path, which names bad lines

It only ever takes an upload that metric_rows would turn into the same points: anything else,
valid or not, is None and goes the general way, which also words every 400. Arrow's reader is
laxer than JSON in places orjson is not (NaN and Infinity, a byte-order mark, two objects on one
line) and reads a name left out of a row as a null, so an upload is taken only when each of its
lines starts with `{` and holds one row, its rows have no field but step, ts and values, every
step is an integer in range, every value and time is a finite number, and, when a row leaves a
name out, no value anywhere is a JSON null (which metric_rows refuses). A name's points are
then the rows that have it: names present in the same rows make one MetricColumns, in row
order, so where a (name, step) comes twice the later row still wins. tests/unit/test_plain_rows.py
checks the two paths against each other on generated uploads, bad ones among them.
"""

from __future__ import annotations

import math
import re
from typing import Any, NamedTuple, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from ..spec import MAX_STEP
from .metric_rows import COLUMN_ROWS, MAX_KEY_CHARS
from .store.metrics import MetricColumns, MetricPoints

__all__ = ["plain_batches"]

_FIELDS = {"step", "ts", "values"}
_NUMBERS = (pa.float64(), pa.int64(), pa.bool_())
_BRACE, _NEWLINE = ord("{"), ord("\n")
# A JSON null given as a value (or as anything: a name holding ":null" is only a false alarm,
# which sends the upload the general way).
_NULL = re.compile(rb":\s*null")


class _Names(NamedTuple):
    """Names present in the same rows (`rows`: a mask; None: every row), and their values."""

    names: tuple[str, ...]
    rows: np.ndarray | None
    values: np.ndarray


def plain_batches(
    data: bytes, chunk_points: int
) -> list[tuple[int, MetricColumns | MetricPoints]] | None:
    """(rows, batch) of decoded NDJSON `data`, about `chunk_points` points a batch, as
    metric_rows.metric_batches would store them (each row counted once, in the first batch
    that has it); None when `data` is not plain (see the module). Names present in fewer than
    COLUMN_ROWS rows go into one MetricPoints, as metric_rows takes such rows: a column batch
    each would cost the write its per-batch work for a few points (think of a name a row)."""
    try:
        lines = _object_lines(data)
        table = _table(data)
        if table.num_rows != lines or not {"step", "values"} <= set(table.column_names) <= _FIELDS:
            return None
        steps = _steps(table.column("step"))
        groups = _values(table.column("values"))
        times = _times(table.column("ts")) if "ts" in table.column_names else None
    except (_NotPlain, pa.ArrowException, ValueError):  # ValueError: invalid UTF-8 in a name
        return None
    if any(group.rows is not None for group in groups) and _NULL.search(data):
        return None  # a null given: Arrow reads it as a name left out, metric_rows refuses it
    batches: list[tuple[int, MetricColumns | MetricPoints]] = []
    counted = np.zeros(lines, bool)
    loose = MetricPoints()
    for group in groups:
        at = np.arange(lines) if group.rows is None else np.flatnonzero(group.rows)
        if len(at) < COLUMN_ROWS:
            _add_points(loose, group, steps[at], None if times is None else times[at])
            continue
        per_batch = max(1, chunk_points // len(group.names))
        for start in range(0, len(at), per_batch):
            rows = at[start : start + per_batch]
            stamps = times[rows] if times is not None else None
            if stamps is not None and np.isnan(stamps).all():
                stamps = None  # as metric_rows: no row of the batch has a time
            first = int(np.count_nonzero(~counted[rows]))
            counted[rows] = True
            batch = MetricColumns(
                group.names, steps[rows], stamps, group.values[start : start + per_batch]
            )
            batches.append((first, batch))
    if loose:
        batches.append((0, loose))
    if not batches:
        return None
    # The last batch counts the rows no column batch counted: those of loose points only, and
    # those of `"values": {}` (no point, but a row).
    unseen = lines - int(np.count_nonzero(counted))
    batches[-1] = (batches[-1][0] + unseen, batches[-1][1])
    return batches


def _add_points(
    points: MetricPoints, group: _Names, steps: np.ndarray, times: np.ndarray | None
) -> None:
    """The group's points into `points`, in row order (the later row of a step wins)."""
    stamps = [None] * len(steps) if times is None else [_time(t) for t in times.tolist()]
    for name, values in zip(group.names, group.values.T.tolist(), strict=True):
        for step, value, ts in zip(steps.tolist(), values, stamps, strict=True):
            points[(name, step)] = (value, ts)


def _time(t: float) -> float | None:
    return None if math.isnan(t) else t  # NaN: the row has no time


class _NotPlain(Exception):
    """The upload is for metric_rows to parse."""


def _object_lines(data: bytes) -> int:
    """The number of lines, each of which starts with `{` (so none is blank)."""
    raw = np.frombuffer(data, np.uint8)
    if not len(raw) or raw[0] != _BRACE:
        raise _NotPlain
    ends = np.flatnonzero(raw == _NEWLINE)
    inner = ends[:-1] if raw[-1] == _NEWLINE else ends
    if not (raw[inner + 1] == _BRACE).all():
        raise _NotPlain
    return len(inner) + 1


def _table(data: bytes) -> pa.Table:
    """The rows as Arrow reads them, in one block (one thread: the server has the other core).
    ArrowInvalid for invalid JSON or UTF-8, a key twice in an object, a field of two types."""
    options = pa_json.ReadOptions(use_threads=False, block_size=len(data) + 1)
    # The stubs know files and paths; the reader takes Arrow's own in-memory file as well.
    return pa_json.read_json(pa.BufferReader(data), read_options=options)  # type: ignore[arg-type]


def _steps(column: pa.ChunkedArray[Any]) -> np.ndarray:
    if column.type != pa.int64() or column.null_count:
        raise _NotPlain
    steps = column.to_numpy()
    if steps.min() < 0 or steps.max() > MAX_STEP:
        raise _NotPlain
    return steps


def _values(column: pa.ChunkedArray[Any]) -> list[_Names]:
    """The names, grouped by the rows that have them (in the order Arrow first met them), each
    group's values a (its rows, its names) float64 matrix of finite numbers (JSON's numbers and
    booleans, as metric_rows takes them). Every row must have `values`."""
    kind = column.type
    if not pa.types.is_struct(kind) or not kind.num_fields or column.null_count:
        raise _NotPlain
    names = [kind.field(i).name for i in range(kind.num_fields)]  # decoded here
    if any(not name or len(name) > MAX_KEY_CHARS for name in names):
        raise _NotPlain
    found: dict[bytes, tuple[list[str], list[np.ndarray], np.ndarray | None]] = {}
    for name, field in zip(
        names, cast(pa.StructArray, column.combine_chunks()).flatten(), strict=True
    ):
        if field.type not in _NUMBERS:
            raise _NotPlain
        rows = field.is_valid().to_numpy(zero_copy_only=False) if field.null_count else None
        values = field.drop_null().to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
        if not np.isfinite(values).all():  # NaN, Infinity: literals JSON (and metric_rows) refuse
            raise _NotPlain
        group = found.setdefault(b"" if rows is None else rows.tobytes(), ([], [], rows))
        group[0].append(name)
        group[1].append(values)
    return [
        _Names(tuple(names), rows, np.column_stack(columns))
        for names, columns, rows in found.values()
    ]


def _times(column: pa.ChunkedArray[Any]) -> np.ndarray | None:
    """Each row's time, NaN for a row without one; None when no row has one."""
    if column.null_count == len(column):
        return None
    if column.type not in (pa.float64(), pa.int64()):
        raise _NotPlain
    if column.type == pa.float64() and not pc.all(pc.is_finite(column)).as_py():
        raise _NotPlain  # NaN or Infinity among the times given (nulls: rows without one)
    return column.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
