"""
The rows of a metrics upload (`{"step", "ts", "values"}` NDJSON, parsed by body.stream_objects)
checked and gathered into batches for store.ingest_metrics, a chunk at a time.

    for rows, batch in upload_batches(body, encoding, chunk_points):
        metrics.write_points(conn, run_seq, batch, touched)     # in order: later rows win

Dense logging sends row after row with the same metric names: from COLUMN_ROWS such rows on,
they become MetricColumns (the steps, times and a matrix of values, built by numpy in one
call), so no Python work is done per value; any other row (no step, other names, a bad value)
is parsed on its own into MetricPoints, which also says which line is wrong. Batches are
yielded in row order, so the last row of a (key, step) wins however the rows were batched.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from .body import decoded_pieces, stream_objects
from .errors import bad_request
from .store.metric_chunks import CHUNK_SHIFT
from .store.metrics import MAX_STEP, MetricColumns, MetricPoints

__all__ = [
    "COLUMN_ROWS",
    "MAX_KEY_CHARS",
    "Batch",
    "metric_batches",
    "upload_batches",
    "whole_chunks",
]

MAX_KEY_CHARS = 512
# Rows sharing their names from which they are written as columns: below it, the arrays cost
# more than the dict they replace.
COLUMN_ROWS = 64
# How many batches' worth of points whole_chunks may hold back as columns.
HELD_BATCHES = 8

Batch = MetricPoints | MetricColumns
Row = tuple[int, dict[str, Any]]


def upload_batches(
    body: bytes, encoding: str | None, chunk_points: int
) -> Iterator[tuple[int, Batch]]:
    """metric_batches of an upload as received (`Content-Encoding: encoding`), decoded a piece
    at a time, once body.survey has found it within its limits."""
    return metric_batches(stream_objects(decoded_pieces(body, encoding)), chunk_points)


def metric_batches(objects: Iterable[Row], chunk_points: int) -> Iterator[tuple[int, Batch]]:
    """
    (rows, batch) of NDJSON rows (line number, object), a chunk of about `chunk_points` points
    at a time (a row is never split). A MetricPoints holds {(key, step): (value, ts)} and, in
    its `by_time`, {(key, ts): value} of rows with `"step": null` (keyed by their time: their
    `ts` is required); within it the last row of a (key, step) wins. 400 names the bad line.
    """
    batches = _Batches()
    bound = max(1, chunk_points)
    for line in objects:
        names = _names_of(line[1], batches.names)
        if names is None or names != batches.names:
            yield from batches.settle()
            batches.names = names
        if names is None:
            _parse_row(*line, batches.points)
            batches.loose += 1
        else:
            batches.alike.append(line)
        if batches.held() >= bound:
            yield from batches.settle()
            yield from batches.drain()
    yield from batches.settle()
    yield from batches.drain()


class _Batches:
    """The rows read and not yet yielded: `loose` rows parsed into `points`, then the rows
    `alike` that share `names`, kept as read until they are settled."""

    def __init__(self) -> None:
        self.points = MetricPoints()
        self.loose = 0
        self.names: tuple[str, ...] | None = None
        self.alike: list[Row] = []

    def held(self) -> int:
        points = len(self.points) + len(self.points.by_time)
        return points + len(self.alike) * len(self.names or ())

    def settle(self) -> Iterator[tuple[int, Batch]]:
        """The rows `alike` as columns, after the loose rows (they came first), or, when too
        few or not all numbers, parsed into `points`."""
        alike, self.alike = self.alike, []
        columns = _columns(self.names, alike) if self.names and len(alike) >= COLUMN_ROWS else None
        if columns is None:
            for line in alike:
                _parse_row(*line, self.points)
            self.loose += len(alike)
            return
        yield from self.drain()
        yield len(alike), columns

    def drain(self) -> Iterator[tuple[int, Batch]]:
        if self.loose:
            yield self.loose, self.points
            self.points, self.loose = MetricPoints(), 0


def whole_chunks(
    batches: Iterable[tuple[int, Batch]], chunk_points: int
) -> Iterator[tuple[int, Batch]]:
    """
    The same rows in the same order, regrouped so that a batch of columns ends where a chunk
    of the store ends (metric_chunks: 4096 steps) when it can: the rows of its last chunk
    are held back and go with the next batch of the same names. Written a batch at a time, a
    dense upload cut every 50,000 points had each batch read back and rewrite the chunk the
    batch before had begun; now each chunk an upload fills is written once. What is held is
    bounded by HELD_BATCHES x `chunk_points` points (a chunk of 4096 rows of up to 97 names
    at the default): as columns, 8 bytes a value, it costs no more than the rows of one batch
    as parsed (Python objects, ~70 bytes a value). Rows are counted with the first batch
    that holds any of theirs (the counts add up).
    """
    bound = HELD_BATCHES * max(1, chunk_points)
    held: MetricColumns | None = None
    owed = 0  # rows of batches held back whole, counted with the next batch yielded
    for rows, batch in batches:
        owed += rows
        if held is not None and isinstance(batch, MetricColumns) and batch.names == held.names:
            batch = _joined(held, batch)
        elif held is not None:
            yield owed - rows, held
            owed = rows
        held = None
        ready: Batch | None = batch
        if isinstance(batch, MetricColumns):
            ready, held = _last_chunk_apart(batch, bound)
        if ready is not None:
            yield owed, ready
            owed = 0
    if held is not None:
        yield owed, held


def _last_chunk_apart(
    cols: MetricColumns, bound: int
) -> tuple[MetricColumns | None, MetricColumns | None]:
    """(the rows before the run of rows at the end in one chunk, that run), or (cols, None)
    when the run holds more than `bound` points."""
    numbers = cols.steps >> CHUNK_SHIFT
    others = np.flatnonzero(numbers != numbers[-1])
    cut = int(others[-1]) + 1 if len(others) else 0
    if (len(numbers) - cut) * len(cols.names) > bound:
        return cols, None
    if cut == 0:
        return None, cols
    return _rows(cols, slice(0, cut)), _rows(cols, slice(cut, None))


def _rows(cols: MetricColumns, part: slice) -> MetricColumns:
    times = None if cols.times is None else cols.times[part]
    return MetricColumns(cols.names, cols.steps[part], times, cols.values[part])


def _joined(a: MetricColumns, b: MetricColumns) -> MetricColumns:
    """The rows of `a`, then those of `b` (the same names)."""
    times = None
    if a.times is not None or b.times is not None:
        times = np.concatenate([_times(a), _times(b)])
    steps = np.concatenate([a.steps, b.steps])
    return MetricColumns(a.names, steps, times, np.concatenate([a.values, b.values]))


def _times(cols: MetricColumns) -> np.ndarray:
    return cols.times if cols.times is not None else np.full(len(cols.steps), np.nan)


def _names_of(row: dict[str, Any], known: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """The row's metric names when it can go into columns: a valid step and time, and
    `values` a non-empty object of valid names; else None (parsed on its own). Names equal to
    `known` (the last row's, checked then) are not checked again."""
    step = row.get("step")
    if type(step) is not int or not 0 <= step <= MAX_STEP:
        return None
    ts = row.get("ts")
    if ts is not None and type(ts) is not float and type(ts) is not int:
        return None
    values = row.get("values")
    if type(values) is not dict or not values:
        return None
    names = tuple(values)
    if names == known:
        return known
    for name in names:
        if not name or len(name) > MAX_KEY_CHARS:
            return None
    return names


def _columns(names: tuple[str, ...], alike: list[Row]) -> MetricColumns | None:
    """The rows (all of `names`) as MetricColumns, or None when a value is not a number (the
    row path then names it)."""
    try:
        matrix = np.array([list(row["values"].values()) for _, row in alike])
    except (ValueError, TypeError):  # a nested list or object among the values
        return None
    if matrix.ndim != 2 or matrix.dtype.kind not in "biuf":  # strings, null: dtype str, object
        return None
    rows = [row for _, row in alike]
    steps = np.fromiter((row["step"] for row in rows), np.int64, len(rows))
    stamps = [row.get("ts") for row in rows]
    times = None
    if stamps.count(None) != len(stamps):
        times = np.array([np.nan if t is None else t for t in stamps], np.float64)
    return MetricColumns(names, steps, times, matrix.astype(np.float64, copy=False))


def _parse_row(lineno: int, row: dict[str, Any], points: MetricPoints) -> None:
    # Exact type checks, not isinstance: this runs once per metric value. orjson never
    # yields NaN or infinities, and its integers fit in 64 bits.
    step = row.get("step")
    if step is not None and (type(step) is not int or not 0 <= step <= MAX_STEP):
        raise _bad_row(
            lineno, f"step must be an integer from 0 to {MAX_STEP} or null, got {step!r}"
        )
    ts = row.get("ts")
    if ts is not None:
        if type(ts) is int:
            ts = float(ts)
        elif type(ts) is not float:
            raise _bad_row(lineno, f"ts must be a number (epoch seconds), got {ts!r}")
    elif step is None:
        raise _bad_row(lineno, "a row without a step is keyed by its time: ts is required")
    values = row.get("values")
    if type(values) is not dict:
        raise _bad_row(lineno, "values must be an object of metric name to number")
    by_time = points.by_time
    for name, value in values.items():
        kind = type(value)
        if kind is not float:
            if kind is not int and kind is not bool:
                raise _bad_row(lineno, f"values[{name!r}] must be a number, got {value!r}")
            value = float(value)
        if not name or len(name) > MAX_KEY_CHARS:
            raise _bad_row(lineno, f"metric names must have 1 to {MAX_KEY_CHARS} characters")
        if step is not None:
            points[(name, step)] = (value, ts)
        elif ts is not None:  # always, when step is None (required above)
            by_time[(name, ts)] = value


def _bad_row(lineno: int, message: str) -> Exception:
    return bad_request("invalid_metrics", f"line {lineno}: {message}")
