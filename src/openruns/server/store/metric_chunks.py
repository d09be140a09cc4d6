"""
Dense step-keyed series as chunks: per (metric key, CHUNK_STEPS aligned steps) one row of
`metric_chunks` holding that range's points as packed columns, instead of a row per point.

Where a point lives (the invariant every function here keeps): each (key, step) is in exactly
one place, a `metric_points` row or a chunk. A chunk is written for a (key, chunk number) when
an upload brings at least DENSE_POINTS points of that range, or when the chunk exists already;
writing it absorbs (reads, merges, deletes) the rows of that key inside its range. So once a
chunk exists every point of its range is in it, and a range without a chunk is all rows: old
rows (before migration 0019) stay valid as they are.

A chunk row: the summary (count, min, max, first_step, last_step, last_value) and three
columns, each a one-byte tag (raw / zstd level 1, kept only where it saves an eighth) and
little-endian arrays:
- steps: empty when the chunk's steps are contiguous (first_step..last_step, the dense case);
  else uint16 deltas, the first from the chunk's first step (CHUNK_STEPS fits in 16 bits);
- vals: float64 (values are finite: the ingest refuses NaN and infinities);
- times: float64 with NaN for a point without a time (a time is finite too, and SQLite
  would store a NaN as NULL anyway), or NULL when no point of the chunk has one.

The block summaries (metrics.py) stay right for every point wherever it lives: a chunk write
computes its levels 1 and 2 here and level 3 is the chunk's own summary (a 16-, 256- or
4096-step block lies inside one chunk's range); levels 4 and up are built in SQL from level 3.

`read` is the one read of a key's points in a step range, rows and chunks merged; every reader
of points goes through it (or `extent` / `first_timed`).
"""

from __future__ import annotations

import itertools
import math
import sys
import threading
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate
from operator import itemgetter, sub
from typing import Any, NamedTuple

import zstandard
from sqlalchemy import Connection, and_, bindparam, delete, func, literal, select

from .schema import BLOCK_SIZES, metric_blocks, metric_chunks, metric_points
from .sql import executemany, upsert

__all__ = [
    "CHUNK_LEVEL",
    "CHUNK_SHIFT",
    "CHUNK_STEPS",
    "DENSE_POINTS",
    "Columns",
    "decode",
    "encode",
    "extent",
    "first_timed",
    "read",
    "write",
]

CHUNK_LEVEL = 3  # the block level whose blocks are chunks
CHUNK_STEPS = BLOCK_SIZES[CHUNK_LEVEL - 1]  # 4096
CHUNK_SHIFT = CHUNK_STEPS.bit_length() - 1  # step >> CHUNK_SHIFT: its chunk number
assert 1 << CHUNK_SHIFT == CHUNK_STEPS
# At least this many points of one (key, chunk) in an upload start a chunk. Creating a chunk
# costs less CPU than rows from ~32 points on, but every later upload into it rewrites it:
# appends of 128 points a key cost ~1.3x rows, of 512 ~0.85x (SQLite; docs/decisions.md,
# "Dense runs"). So a chunk is started where uploads are that large.
DENSE_POINTS = 512
_IN_CHUNK = 500

_RAW, _ZSTD = 0, 1
_SWAP = sys.byteorder == "big"
_local = threading.local()  # zstd contexts are not thread-safe; one pair per thread


def _zstd() -> tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]:
    pair = getattr(_local, "pair", None)
    if pair is None:
        pair = _local.pair = (zstandard.ZstdCompressor(level=1), zstandard.ZstdDecompressor())
    return pair


def _pack(column: array[Any], compress: bool) -> bytes:
    if _SWAP:
        column = array(column.typecode, column)
        column.byteswap()
    raw = column.tobytes()
    if compress and len(raw) >= 64:
        packed = _zstd()[0].compress(raw)
        if len(packed) <= len(raw) * 7 // 8:
            return bytes((_ZSTD,)) + packed
    return bytes((_RAW,)) + raw


def _unpack(typecode: str, blob: bytes) -> array[Any]:
    blob = bytes(blob)
    raw = blob[1:] if blob[0] == _RAW else _zstd()[1].decompress(blob[1:])
    column = array(typecode)
    column.frombytes(raw)
    if _SWAP:
        column.byteswap()
    return column


class Columns(NamedTuple):
    """A chunk's points in step order: steps, values, and times (NaN: none), or None when no
    point has a time."""

    steps: Sequence[int]
    values: array[float]
    times: array[float] | None


def encode(cols: Columns) -> tuple[bytes, bytes, bytes | None]:
    """(steps, vals, times) columns of a chunk's points (at least one, steps ascending within
    one chunk's range)."""
    steps = cols.steps
    if steps[-1] - steps[0] + 1 == len(steps):
        packed_steps = b""
    else:
        deltas = array("H", [steps[0] % CHUNK_STEPS])
        deltas.extend(map(sub, steps[1:], steps[:-1]))
        packed_steps = _pack(deltas, compress=True)
    times = None if cols.times is None else _pack(cols.times, compress=True)
    return packed_steps, _pack(cols.values, compress=True), times


def decode(
    first_step: int, last_step: int, steps: bytes, vals: bytes, times: bytes | None
) -> Columns:
    values = _unpack("d", vals)
    if not steps:
        stepped: Sequence[int] = range(first_step, last_step + 1)
    else:
        deltas = _unpack("H", steps)
        base = first_step - first_step % CHUNK_STEPS
        stepped = list(accumulate(deltas, initial=base))[1:]
    return Columns(stepped, values, None if times is None else _unpack("d", times))


def _ts(t: float) -> float | None:
    return None if t != t else t  # NaN: no time


# -- writes ---------------------------------------------------------------------------------

_c, _p = metric_chunks, metric_points
_CHUNK_COLUMNS = (
    "key_id", "chunk", "count", "min", "max", "first_step", "last_step", "last_value",
    "steps", "vals", "times",
)  # fmt: skip
_BLOCK_COLUMNS = ("key_id", "level", "block", "count", "min", "max", "last_step", "last_value")


def write(
    conn: Connection,
    groups: dict[tuple[int, int], dict[int, tuple[float, float | None]]],
    chunked: dict[int, set[int]],
) -> dict[tuple[int, int], dict[int, tuple[float, float | None]]]:
    """
    Merge the upload's points grouped by (key id, chunk number) into chunks where they belong
    (DENSE_POINTS or more, or the chunk exists); the rest are returned, to be written as rows.
    Block summaries of levels 1 to CHUNK_LEVEL of every chunk written are upserted; its
    chunk number is added to `chunked` ({key id: chunks}) for the coarser levels.
    """
    stored = _stored(conn, groups)
    dense = {g for g, points in groups.items() if g in stored or len(points) >= DENSE_POINTS}
    if not dense:
        return groups
    absorbed = _absorb(conn, [g for g in dense if g not in stored])
    chunk_rows: list[tuple[Any, ...]] = []
    block_rows: list[tuple[Any, ...]] = []
    for key_id, number in sorted(dense):
        new = groups[(key_id, number)]
        old = stored.get((key_id, number))
        rows = absorbed.get((key_id, number))
        cols = _merge(old, rows, new)
        packed = encode(cols)
        values = cols.values
        chunk_rows.append(
            (key_id, number, len(values), min(values), max(values), cols.steps[0],
             cols.steps[-1], values[-1], *packed)
        )  # fmt: skip
        # The level-2 blocks of the new points, and of the absorbed rows (written as rows
        # earlier in this upload, their blocks may not be built yet).
        size = BLOCK_SIZES[1]
        first, last = min(new), max(new)
        if rows:
            first, last = min(first, min(rows)), max(last, max(rows))
        block_rows.extend(_blocks(key_id, cols, range(first // size, last // size + 1)))
        chunked.setdefault(key_id, set()).add(number)
    executemany(
        conn, upsert(conn, _c, _CHUNK_COLUMNS[:2], _CHUNK_COLUMNS[2:]), _CHUNK_COLUMNS, chunk_rows
    )
    executemany(
        conn, upsert(conn, metric_blocks, _BLOCK_COLUMNS[:3], _BLOCK_COLUMNS[3:]),
        _BLOCK_COLUMNS, block_rows,
    )  # fmt: skip
    return {g: points for g, points in groups.items() if g not in dense}


def _stored(conn: Connection, groups: Iterable[tuple[int, int]]) -> dict[tuple[int, int], Columns]:
    """The stored chunks among `groups`, decoded: which exist in one query (per _IN_CHUNK
    keys, over the upload's chunk numbers: their summaries only), then their columns, one
    query per chunk number (an upload's keys usually share one or two)."""
    wanted = set(groups)
    if not wanted:
        return {}
    ids = sorted({k for k, _ in wanted})
    numbers = [n for _, n in wanted]
    found: dict[int, list[int]] = {}
    query = select(_c.c.key_id, _c.c.chunk).where(
        _c.c.chunk >= min(numbers), _c.c.chunk <= max(numbers)
    )
    for i in range(0, len(ids), _IN_CHUNK):
        for key_id, number in conn.execute(query.where(_c.c.key_id.in_(ids[i : i + _IN_CHUNK]))):
            if (key_id, number) in wanted:
                found.setdefault(number, []).append(key_id)
    out: dict[tuple[int, int], Columns] = {}
    load = select(_c.c.key_id, _c.c.first_step, _c.c.last_step, _c.c.steps, _c.c.vals, _c.c.times)
    for number, keys in found.items():
        for i in range(0, len(keys), _IN_CHUNK):
            where = (_c.c.chunk == number, _c.c.key_id.in_(keys[i : i + _IN_CHUNK]))
            for key_id, first, last, steps, vals, times in conn.execute(load.where(*where)):
                out[(key_id, number)] = decode(first, last, steps, vals, times)
    return out


def _absorb(
    conn: Connection, groups: list[tuple[int, int]]
) -> dict[tuple[int, int], dict[int, tuple[float, float | None]]]:
    """The rows inside the ranges of chunks about to be created, read and deleted: one query
    per chunk number (per _IN_CHUNK keys)."""
    out: dict[tuple[int, int], dict[int, tuple[float, float | None]]] = {}
    by_number: dict[int, list[int]] = {}
    for key_id, number in groups:
        by_number.setdefault(number, []).append(key_id)
    query = select(_p.c.key_id, _p.c.step, _p.c.value, _p.c.ts)
    for number, keys in by_number.items():
        lo, hi = number * CHUNK_STEPS, (number + 1) * CHUNK_STEPS - 1
        for i in range(0, len(keys), _IN_CHUNK):
            where = (_p.c.key_id.in_(keys[i : i + _IN_CHUNK]), _p.c.step >= lo, _p.c.step <= hi)
            for key_id, step, value, ts in conn.execute(query.where(*where)):
                out.setdefault((key_id, number), {})[step] = (value, ts)
    if out:
        gone = delete(_p).where(
            _p.c.key_id == bindparam("k"),
            _p.c.step >= bindparam("lo"),
            _p.c.step <= bindparam("hi"),
        )
        conn.execute(
            gone,
            [{"k": k, "lo": n * CHUNK_STEPS, "hi": (n + 1) * CHUNK_STEPS - 1} for k, n in out],
        )
    return out


def _merge(
    old: Columns | None,
    rows: dict[int, tuple[float, float | None]] | None,
    new: dict[int, tuple[float, float | None]],
) -> Columns:
    """The chunk's points after this write: the stored ones (`old`, or the absorbed `rows`),
    then the new ones, the new winning per step."""
    if old is not None and min(new) > old.steps[-1]:  # an append: concatenate
        steps, added = _columns(new)
        merged = list(old.steps)
        merged.extend(steps)
        values = array("d", old.values)
        values.extend(map(itemgetter(0), added))
        stamps = list(map(itemgetter(1), added))
        if old.times is None and stamps.count(None) == len(stamps):
            return Columns(merged, values, None)
        times = (
            array("d", old.times)
            if old.times is not None
            else array("d", [math.nan]) * len(old.steps)
        )
        times.extend(_times(stamps))
        return Columns(merged, values, times)
    points: dict[int, tuple[float, float | None]] = {}
    if old is not None:
        old_times = old.times
        for i, s in enumerate(old.steps):
            points[s] = (old.values[i], None if old_times is None else _ts(old_times[i]))
    if rows:
        points.update(rows)
    points.update(new)
    steps, merged_points = _columns(points)
    values = array("d", map(itemgetter(0), merged_points))
    stamps = list(map(itemgetter(1), merged_points))
    if stamps.count(None) == len(stamps):
        return Columns(steps, values, None)
    return Columns(steps, values, array("d", _times(stamps)))


def _columns(
    points: dict[int, tuple[float, float | None]],
) -> tuple[list[int], list[tuple[float, float | None]]]:
    """(steps, (value, ts) points) in step order."""
    items = sorted(points.items())
    return list(map(itemgetter(0), items)), list(map(itemgetter(1), items))


def _times(stamps: list[float | None]) -> list[float]:
    """Times with NaN for none (no copy when every point has one)."""
    if None not in stamps:
        return stamps  # type: ignore[return-value]
    return [math.nan if t is None else t for t in stamps]


def _blocks(key_id: int, cols: Columns, touched: Iterable[int]) -> list[tuple[Any, ...]]:
    """Block rows (_BLOCK_COLUMNS) of the level-2 blocks `touched` (and their level-1 blocks)
    and of the chunk itself (level CHUNK_LEVEL), from its columns."""
    s1, s2 = BLOCK_SIZES[0], BLOCK_SIZES[1]
    steps, values = cols.steps, cols.values
    rows: list[tuple[Any, ...]] = []
    for b2 in touched:
        start, end = bisect_left(steps, b2 * s2), bisect_left(steps, (b2 + 1) * s2)
        if start == end:
            continue
        i = start
        while i < end:
            b1 = steps[i] // s1
            j = bisect_left(steps, (b1 + 1) * s1, i, end)
            part = values[i:j]
            rows.append((key_id, 1, b1, j - i, min(part), max(part), steps[j - 1], part[-1]))
            i = j
        part = values[start:end]
        rows.append((key_id, 2, b2, end - start, min(part), max(part), steps[end - 1], part[-1]))
    n = len(values)
    rows.append(
        (key_id, CHUNK_LEVEL, steps[0] // CHUNK_STEPS, n, min(values), max(values), steps[-1],
         values[-1])
    )  # fmt: skip
    return rows


# -- reads ----------------------------------------------------------------------------------

_IN_RANGE = and_(
    _c.c.key_id == bindparam("key_id"),
    _c.c.chunk >= bindparam("c0"),
    _c.c.chunk <= bindparam("c1"),
    _c.c.last_step >= bindparam("lo"),
    _c.c.first_step <= bindparam("hi"),
)
_SUMMARY = select(_c.c.chunk, _c.c.count, _c.c.first_step, _c.c.last_step).where(_IN_RANGE)
_UP, _DOWN = _SUMMARY.order_by(_c.c.chunk), _SUMMARY.order_by(_c.c.chunk.desc())
# With the length of the steps column: 0 when the chunk's steps are contiguous, so an edge's
# count needs no decoding.
_EXTENT = select(
    _c.c.chunk, _c.c.count, _c.c.first_step, _c.c.last_step, func.length(_c.c.steps)
).where(_IN_RANGE)
_TIMED_UP = _UP.where(_c.c.times.is_not(None))
_TIMED_DOWN = _DOWN.where(_c.c.times.is_not(None))
_LOAD = select(_c.c.first_step, _c.c.last_step, _c.c.steps, _c.c.vals, _c.c.times).where(
    _c.c.key_id == bindparam("key_id"), _c.c.chunk == bindparam("chunk")
)
_ROWS_IN = and_(
    _p.c.key_id == bindparam("key_id"), _p.c.step >= bindparam("lo"), _p.c.step <= bindparam("hi")
)
_ROWS = select(_p.c.step, _p.c.value, _p.c.ts).where(_ROWS_IN)
_ROWS_UP = _ROWS.order_by(_p.c.step).limit(bindparam("n"))
_ROWS_DOWN = _ROWS.order_by(_p.c.step.desc()).limit(bindparam("n"))
_ROW_FIRST = select(func.min(_p.c.step)).where(_ROWS_IN)
_ROW_LAST = select(func.max(_p.c.step)).where(_ROWS_IN)
_ROW_COUNT_UP_TO = select(func.count()).select_from(
    select(literal(1)).where(_ROWS_IN).limit(bindparam("up_to")).subquery()
)
_ROW_TIMED = select(_p.c.step, _p.c.ts).where(_ROWS_IN, _p.c.ts.is_not(None))
_ROW_TIMED_UP = _ROW_TIMED.order_by(_p.c.step).limit(1)
_ROW_TIMED_DOWN = _ROW_TIMED.order_by(_p.c.step.desc()).limit(1)

Point = tuple[int, float, float | None]


def _where(key_id: int, lo: int, hi: int) -> dict[str, int]:
    return {
        "key_id": key_id, "lo": lo, "hi": hi,
        "c0": lo // CHUNK_STEPS, "c1": hi // CHUNK_STEPS,
    }  # fmt: skip


def _load(conn: Connection, key_id: int, chunk: int) -> Columns:
    first, last, steps, vals, times = conn.execute(_LOAD, {"key_id": key_id, "chunk": chunk}).one()
    return decode(first, last, steps, vals, times)


def _slice(cols: Columns, lo: int, hi: int) -> list[Point]:
    """The chunk's points with lo <= step <= hi, as (step, value, ts) tuples, in step order."""
    steps = cols.steps
    i, j = bisect_left(steps, lo), bisect_right(steps, hi)
    if cols.times is None:
        return list(zip(steps[i:j], cols.values[i:j], itertools.repeat(None), strict=False))
    times = [None if t != t else t for t in cols.times[i:j]]  # NaN: no time
    return list(zip(steps[i:j], cols.values[i:j], times, strict=True))


def _driver_rows(conn: Connection, stmt: Any, params: dict[str, Any]) -> list[Any]:
    # The driver's tuples as they are: no result processing needed, and skipping SQLAlchemy's
    # rows halves the CPU of reading a page (an export reads every point).
    result = conn.execute(stmt, params)
    try:
        return list(result.cursor.fetchall())
    finally:
        result.close()


def _numbers(conn: Connection, stmt: Any, where: dict[str, int]) -> Iterator[int]:
    """The chunk numbers `stmt` selects, a few at a time (a paged read of a long series stops
    after the first chunks)."""
    result = conn.execute(stmt, where)
    try:
        while batch := result.fetchmany(16):
            yield from (row[0] for row in batch)
    finally:
        result.close()


def read(
    conn: Connection,
    key_id: int,
    lo: int,
    hi: int,
    limit: int | None = None,
    descending: bool = False,
) -> list[Point]:
    """(step, value, ts) of the key's points with lo <= step <= hi, rows and chunks merged, in
    step order (descending: from hi down), the first `limit` of them when given."""
    if lo > hi:
        return []
    where = _where(key_id, lo, hi)
    n = -1 if limit is None else limit  # LIMIT -1: none (SQLite); see below for PostgreSQL
    if n < 0 and conn.dialect.name == "postgresql":
        n = 2**62
    rows: list[Point] = _driver_rows(
        conn, _ROWS_DOWN if descending else _ROWS_UP, {**where, "n": n}
    )
    got: list[Point] = []
    for number in _numbers(conn, _DOWN if descending else _UP, where):
        cols = _load(conn, key_id, number)
        part = _slice(cols, lo, hi)
        if descending:
            part.reverse()
        got.extend(part)
        if limit is not None and len(got) >= limit:
            break
    if not got:
        return rows
    if rows:
        got = sorted(rows + got, key=lambda point: point[0], reverse=descending)
    return got if limit is None else got[:limit]


def extent(
    conn: Connection, key_id: int, lo: int, hi: int, up_to: int
) -> tuple[int | None, int | None, int]:
    """(first step, last step, count) of the key's points in lo..hi; the count of rows among
    them is counted up to `up_to` only (enough to know whether a read must be downsampled)."""
    where = _where(key_id, lo, hi)
    first = conn.execute(_ROW_FIRST, where).scalar_one()
    last = conn.execute(_ROW_LAST, where).scalar_one()
    count = 0
    if first is not None:
        count = conn.execute(_ROW_COUNT_UP_TO, {**where, "up_to": up_to}).scalar_one()
    for number, n, c_first, c_last, gaps in conn.execute(_EXTENT, where).all():
        if (c_first < lo or c_last > hi) and not gaps:  # contiguous, at an edge
            c_first, c_last = max(c_first, lo), min(c_last, hi)
            n = c_last - c_first + 1
        elif c_first < lo or c_last > hi:  # at an edge of the range: its points counted
            steps = _load(conn, key_id, number).steps
            i, j = bisect_left(steps, lo), bisect_right(steps, hi)
            if i == j:
                continue
            n, c_first, c_last = j - i, steps[i], steps[j - 1]
        first = c_first if first is None else min(first, c_first)
        last = c_last if last is None else max(last, c_last)
        count += n
    return first, last, count


def first_timed(
    conn: Connection, key_id: int, lo: int, hi: int, descending: bool = False
) -> tuple[int, float] | None:
    """(step, ts) of the key's first point in lo..hi that has a time (descending: the last)."""
    where = _where(key_id, lo, hi)
    row = conn.execute(_ROW_TIMED_DOWN if descending else _ROW_TIMED_UP, where).first()
    best: tuple[int, float] | None = None if row is None else (row[0], row[1])
    for number in _numbers(conn, _TIMED_DOWN if descending else _TIMED_UP, where):
        cols = _load(conn, key_id, number)
        steps, times = cols.steps, cols.times
        assert times is not None
        i, j = bisect_left(steps, lo), bisect_right(steps, hi)
        order = range(j - 1, i - 1, -1) if descending else range(i, j)
        found = next(((steps[x], times[x]) for x in order if times[x] == times[x]), None)
        if found is None:
            continue
        if best is None or (found[0] > best[0] if descending else found[0] < best[0]):
            best = found
        break  # chunks come in step order: a later one cannot be nearer the start
    return best
