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
computes its level-2 blocks here and level 3 is the chunk's own summary (a 16-, 256- or
4096-step block lies inside one chunk's range); levels 4 and up are built in SQL from level 3.
A chunk's level-1 blocks are not stored: `level_one` computes them from the chunk when a read
asks for them (stored, they were 16 of every 17 block rows a dense upload wrote).

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
from typing import Any, NamedTuple

import numpy as np
import zstandard
from sqlalchemy import Connection, and_, bindparam, delete, func, literal, select

from .schema import BLOCK_SIZES, metric_blocks, metric_chunks, metric_points
from .sql import among, driver_rows, executemany, upsert

__all__ = [
    "CHUNK_LEVEL",
    "CHUNK_SHIFT",
    "CHUNK_STEPS",
    "DENSE_POINTS",
    "Columns",
    "Group",
    "Points",
    "Summary",
    "decode",
    "dict_of",
    "encode",
    "extent",
    "first_timed",
    "last_per_step",
    "level_one",
    "points_of",
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

_RAW, _ZSTD = 0, 1
_SWAP = sys.byteorder == "big"
_local = threading.local()  # zstd contexts are not thread-safe; one pair per thread


def _zstd() -> tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]:
    pair = getattr(_local, "pair", None)
    if pair is None:
        pair = _local.pair = (zstandard.ZstdCompressor(level=1), zstandard.ZstdDecompressor())
    return pair


def _pack(raw: bytes, compress: bool) -> bytes:
    """Little-endian column bytes behind their tag, compressed where that saves an eighth."""
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


def encode(
    cols: Columns | Points, packed_times: dict[bytes, bytes] | None = None
) -> tuple[bytes, bytes, bytes | None]:
    """(steps, vals, times) columns of a chunk's points (at least one, steps ascending within
    one chunk's range). `packed_times` ({raw: packed}, kept by the caller across the chunks of
    one write) compresses a times column once: the keys of a row share its time, so an
    upload's keys have the same times column in each chunk (its zstd was two thirds of a
    chunk's encoding, 20 times over for 20 keys)."""
    steps = np.asarray(cols.steps, np.int64)
    if steps[-1] - steps[0] + 1 == len(steps):
        packed_steps = b""
    else:
        deltas = np.diff(steps, prepend=steps[0] - steps[0] % CHUNK_STEPS)
        packed_steps = _pack(deltas.astype("<u2").tobytes(), compress=True)
    values = np.asarray(cols.values, "<f8").tobytes()
    times = None
    if cols.times is not None:
        raw = np.asarray(cols.times, "<f8").tobytes()
        memo = {} if packed_times is None else packed_times
        times = memo.get(raw)
        if times is None:
            times = memo[raw] = _pack(raw, True)
    return packed_steps, _pack(values, compress=True), times


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


class Points(NamedTuple):
    """Points of one (key, chunk) to write: steps ascending and unique (int64), their values
    (float64), and their times (float64, NaN: none), or None when no point has one."""

    steps: np.ndarray
    values: np.ndarray
    times: np.ndarray | None


Group = Points | dict[int, tuple[float, float | None]]


def points_of(group: Group) -> Points:
    """A group as Points (a dict {step: (value, ts)} sorted into columns)."""
    if isinstance(group, Points):
        return group
    items = sorted(group.items())
    steps = np.fromiter((step for step, _ in items), np.int64, len(items))
    values = np.fromiter((point[0] for _, point in items), np.float64, len(items))
    stamps = [point[1] for _, point in items]
    if stamps.count(None) == len(stamps):
        return Points(steps, values, None)
    times = np.array([math.nan if t is None else t for t in stamps], np.float64)
    return Points(steps, values, times)


def dict_of(group: Group) -> dict[int, tuple[float, float | None]]:
    """A group as {step: (value, ts)}."""
    if not isinstance(group, Points):
        return group
    stamps: Iterable[float | None] = (
        itertools.repeat(None) if group.times is None else map(_ts, group.times.tolist())
    )
    return dict(
        zip(group.steps.tolist(), zip(group.values.tolist(), stamps, strict=False), strict=False)
    )


def write(
    conn: Connection,
    groups: dict[tuple[int, int], Group],
    chunked: dict[int, set[int]],
) -> dict[tuple[int, int], Group]:
    """
    Merge the upload's points grouped by (key id, chunk number) into chunks where they belong
    (DENSE_POINTS or more, or the chunk exists); the rest are returned, to be written as rows.
    Block summaries of levels 1 to CHUNK_LEVEL of every chunk written are upserted; its
    chunk number is added to `chunked` ({key id: chunks}) for the coarser levels.
    """
    stored = _stored(conn, groups)
    dense = {g for g, group in groups.items() if g in stored or _size(group) >= DENSE_POINTS}
    if not dense:
        return groups
    absorbed = _absorb(conn, [g for g in dense if g not in stored])
    chunk_rows: list[tuple[Any, ...]] = []
    block_rows: list[tuple[Any, ...]] = []
    packed_times: dict[bytes, bytes] = {}
    for key_id, number in sorted(dense):
        new = points_of(groups[(key_id, number)])
        rows = absorbed.get((key_id, number))
        merged = _merge(stored.get((key_id, number)), rows, new)
        values = merged.values
        columns = encode(merged, packed_times)
        chunk_rows.append(
            (key_id, number, len(values), float(values.min()), float(values.max()),
             int(merged.steps[0]), int(merged.steps[-1]), float(values[-1]), *columns)
        )  # fmt: skip
        # The level-2 blocks of the new points, and of the absorbed rows (written as rows
        # earlier in this upload, their blocks may not be built yet).
        first, last = int(new.steps[0]), int(new.steps[-1])
        if rows:
            first, last = min(first, min(rows)), max(last, max(rows))
        block_rows.extend(_blocks(key_id, number, merged, first, last))
        chunked.setdefault(key_id, set()).add(number)
    executemany(
        conn, upsert(conn, _c, _CHUNK_COLUMNS[:2], _CHUNK_COLUMNS[2:]), _CHUNK_COLUMNS, chunk_rows
    )
    executemany(
        conn, upsert(conn, metric_blocks, _BLOCK_COLUMNS[:3], _BLOCK_COLUMNS[3:]),
        _BLOCK_COLUMNS, block_rows,
    )  # fmt: skip
    return {g: points for g, points in groups.items() if g not in dense}


def _size(group: Group) -> int:
    return len(group.steps if isinstance(group, Points) else group)


def _stored(conn: Connection, groups: Iterable[tuple[int, int]]) -> dict[tuple[int, int], Points]:
    """The stored chunks among `groups`, decoded: which exist in one query (sql.among: per 500
    keys on SQLite; over the upload's chunk numbers, their summaries only), then their
    columns, a query per chunk number (an upload's keys usually share one or two)."""
    wanted = set(groups)
    if not wanted:
        return {}
    ids = sorted({k for k, _ in wanted})
    numbers = [n for _, n in wanted]
    found: dict[int, list[int]] = {}
    query = select(_c.c.key_id, _c.c.chunk).where(
        _c.c.chunk >= min(numbers), _c.c.chunk <= max(numbers)
    )
    for clause in among(conn, _c.c.key_id, ids):
        for key_id, number in conn.execute(query.where(clause)):
            if (key_id, number) in wanted:
                found.setdefault(number, []).append(key_id)
    out: dict[tuple[int, int], Points] = {}
    load = select(_c.c.key_id, _c.c.first_step, _c.c.last_step, _c.c.steps, _c.c.vals, _c.c.times)
    for number, keys in found.items():
        for clause in among(conn, _c.c.key_id, keys):
            where = (_c.c.chunk == number, clause)
            for key_id, first, last, steps, vals, times in conn.execute(load.where(*where)):
                out[(key_id, number)] = _decode_points(first, last, steps, vals, times)
    return out


def _decode_points(
    first_step: int, last_step: int, steps: bytes, vals: bytes, times: bytes | None
) -> Points:
    """A stored chunk as Points (decode, in arrays rather than the readers' sequences)."""
    values = np.frombuffer(_unpack("d", vals), np.float64)
    if not steps:
        stepped = np.arange(first_step, last_step + 1, dtype=np.int64)
    else:
        deltas = np.frombuffer(_unpack("H", steps), np.uint16).astype(np.int64)
        stepped = np.cumsum(deltas) + (first_step - first_step % CHUNK_STEPS)
    stamps = None if times is None else np.frombuffer(_unpack("d", times), np.float64)
    return Points(stepped, values, stamps)


def _absorb(
    conn: Connection, groups: list[tuple[int, int]]
) -> dict[tuple[int, int], dict[int, tuple[float, float | None]]]:
    """The rows inside the ranges of chunks about to be created, read and deleted: one query
    per chunk number."""
    out: dict[tuple[int, int], dict[int, tuple[float, float | None]]] = {}
    by_number: dict[int, list[int]] = {}
    for key_id, number in groups:
        by_number.setdefault(number, []).append(key_id)
    query = select(_p.c.key_id, _p.c.step, _p.c.value, _p.c.ts)
    for number, keys in by_number.items():
        lo, hi = number * CHUNK_STEPS, (number + 1) * CHUNK_STEPS - 1
        for clause in among(conn, _p.c.key_id, keys):
            where = (clause, _p.c.step >= lo, _p.c.step <= hi)
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
        # Their level-1 blocks too: a chunk's are derived from it (level_one), and a stale one
        # would be summed into a level-2 block rebuilt from the rows' blocks.
        ratio = CHUNK_STEPS // BLOCK_SIZES[0]
        stale = delete(metric_blocks).where(
            metric_blocks.c.key_id == bindparam("k"),
            metric_blocks.c.level == 1,
            metric_blocks.c.block >= bindparam("lo"),
            metric_blocks.c.block <= bindparam("hi"),
        )
        conn.execute(stale, [{"k": k, "lo": n * ratio, "hi": (n + 1) * ratio - 1} for k, n in out])
    return out


def _merge(
    old: Points | None, rows: dict[int, tuple[float, float | None]] | None, new: Points
) -> Points:
    """The chunk's points after this write: the stored ones (`old`, or the absorbed `rows`),
    then the new ones, the new winning per step."""
    parts = [p for p in (old, points_of(rows) if rows else None, new) if p is not None]
    if len(parts) == 1:
        return new
    steps = np.concatenate([p.steps for p in parts])
    values = np.concatenate([p.values for p in parts])
    times = None
    if any(p.times is not None for p in parts):
        times = np.concatenate([_nan_times(p) for p in parts])
    if all(a.steps[-1] < b.steps[0] for a, b in itertools.pairwise(parts)):  # appends
        return Points(steps, values, times)
    keep = last_per_step(steps)
    return Points(steps[keep], values[keep], None if times is None else times[keep])


def last_per_step(steps: np.ndarray) -> np.ndarray:
    """Indices of `steps` in step order, of the last one given where a step comes twice."""
    order = np.argsort(steps, kind="stable")  # equal steps keep their order: last is latest
    ordered = steps[order]
    last = np.empty(len(ordered), bool)
    last[:-1] = ordered[1:] != ordered[:-1]
    last[-1:] = True
    return order[last]


def _nan_times(points: Points) -> np.ndarray:
    if points.times is not None:
        return points.times
    return np.full(len(points.steps), math.nan)


def _blocks(
    key_id: int, number: int, points: Points, first: int, last: int
) -> list[tuple[Any, ...]]:
    """Block rows (_BLOCK_COLUMNS) of the level-2 blocks holding steps `first` to `last`, and
    of the chunk itself (level CHUNK_LEVEL), from its points. A chunk's level-1 blocks are not
    stored: `level_one` derives them from the chunk when read (they were 16 of every 17 block
    rows a dense upload wrote, and about half its write time: docs/benchmarks.md)."""
    s2 = BLOCK_SIZES[1]
    lo, hi = np.searchsorted(points.steps, [first // s2 * s2, (last // s2 + 1) * s2])
    rows: list[tuple[Any, ...]] = [
        (key_id, 2, *summary)
        for summary in _summaries(points.steps[lo:hi], points.values[lo:hi], s2)
    ]
    values = points.values
    rows.append(
        (key_id, CHUNK_LEVEL, number, len(values), float(values.min()), float(values.max()),
         int(points.steps[-1]), float(values[-1]))
    )  # fmt: skip
    return rows


def _summaries(steps: np.ndarray, values: np.ndarray, size: int) -> Iterator[tuple[Any, ...]]:
    """(block, count, min, max, last_step, last_value) of the `size`-step blocks holding these
    points (steps ascending)."""
    if not len(steps):
        return iter(())
    ids = steps // size
    starts = np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1])))
    ends = np.append(starts[1:], len(ids)) - 1
    return zip(
        ids[starts].tolist(), (ends - starts + 1).tolist(),
        np.minimum.reduceat(values, starts).tolist(), np.maximum.reduceat(values, starts).tolist(),
        steps[ends].tolist(), values[ends].tolist(), strict=True,
    )  # fmt: skip


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
# extent(): only the range's first and last chunk numbers can hold steps outside it; the
# chunks between are read for their first and last steps and a count bounded by `up_to`, so
# a range of 12,207 chunks (a 50M-step key) costs three index probes, not 12,207 rows.
_EDGE_CHUNKS = select(
    _c.c.count, _c.c.chunk, _c.c.first_step, _c.c.last_step, func.length(_c.c.steps)
).where(_c.c.key_id == bindparam("key_id"), _c.c.chunk.in_([bindparam("c0"), bindparam("c1")]))
_INNER = and_(
    _c.c.key_id == bindparam("key_id"), _c.c.chunk > bindparam("c0"), _c.c.chunk < bindparam("c1")
)
_INNER_FIRST = select(_c.c.first_step).where(_INNER).order_by(_c.c.chunk).limit(1)
_INNER_LAST = select(_c.c.last_step).where(_INNER).order_by(_c.c.chunk.desc()).limit(1)
_INNER_COUNTS = select(_c.c.count).where(_INNER).order_by(_c.c.chunk).limit(bindparam("up_to"))
_INNER_COUNT_UP_TO = select(func.coalesce(func.sum(_INNER_COUNTS.subquery().c.count), 0))
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
# extent()'s six probes in one statement (a statement costs ~0.1 ms of Python before SQLite
# runs it, and a chart read asks one extent a series: the compare page's 400 series): each
# scalar subquery keeps its own index walk (a min(), a max() and a LIMIT each).
_EXTENT = select(
    _ROW_FIRST.scalar_subquery(),
    _ROW_LAST.scalar_subquery(),
    _ROW_COUNT_UP_TO.scalar_subquery(),
    _INNER_FIRST.scalar_subquery(),
    _INNER_LAST.scalar_subquery(),
    _INNER_COUNT_UP_TO.scalar_subquery(),
)
_ROW_TIMED = select(_p.c.step, _p.c.ts).where(_ROWS_IN, _p.c.ts.is_not(None))
_ROW_TIMED_UP = _ROW_TIMED.order_by(_p.c.step).limit(1)
_ROW_TIMED_DOWN = _ROW_TIMED.order_by(_p.c.step.desc()).limit(1)

_CHUNK_VALUES = (
    select(_c.c.chunk, _c.c.first_step, _c.c.last_step, _c.c.steps, _c.c.vals)
    .where(_c.c.key_id == bindparam("key_id"), _c.c.chunk.between(bindparam("c0"), bindparam("c1")))
    .order_by(_c.c.chunk)
)
_b = metric_blocks
_LEVEL_ONE = (
    select(_b.c.count, _b.c.min, _b.c.max, _b.c.last_step, _b.c.last_value)
    .where(
        _b.c.key_id == bindparam("key_id"),
        _b.c.level == 1,
        _b.c.block >= bindparam("first"),
        _b.c.block < bindparam("end"),
    )
    .order_by(_b.c.block)
)

Point = tuple[int, float, float | None]
Summary = tuple[int, float, float, int, float]  # (count, min, max, last_step, last_value)


def level_one(conn: Connection, key_id: int, first: int, end: int) -> list[Summary]:
    """The summaries of level-1 blocks first..end-1 of a key that have points, in step order:
    computed from the chunks where the range has chunks, read from the stored blocks of its
    rows elsewhere (blocks stored inside a chunk's range before chunks' level-1 blocks were
    derived are passed over: the chunk holds every point of its range)."""
    size = BLOCK_SIZES[0]
    lo, hi = first * size, end * size - 1
    out: list[Summary] = []
    chunked: set[int] = set()
    where = {"key_id": key_id, "c0": lo >> CHUNK_SHIFT, "c1": hi >> CHUNK_SHIFT}
    for number, first_step, last_step, steps, vals in driver_rows(conn, _CHUNK_VALUES, where):
        chunked.add(number)
        points = _decode_points(first_step, last_step, steps, vals, None)
        a, b = np.searchsorted(points.steps, [lo, hi + 1])
        out.extend(s[1:] for s in _summaries(points.steps[a:b], points.values[a:b], size))
    where = {"key_id": key_id, "first": first, "end": end}
    stored: list[Summary] = driver_rows(conn, _LEVEL_ONE, where)
    if not chunked:
        return stored
    out.extend(r for r in stored if r[3] >> CHUNK_SHIFT not in chunked)
    out.sort(key=lambda summary: summary[3])
    return out


def _where(key_id: int, lo: int, hi: int) -> dict[str, int]:
    return {
        "key_id": key_id, "lo": lo, "hi": hi,
        "c0": lo // CHUNK_STEPS, "c1": hi // CHUNK_STEPS,
    }  # fmt: skip


def _load(conn: Connection, key_id: int, chunk: int) -> Columns:
    [(first, last, steps, vals, times)] = driver_rows(
        conn, _LOAD, {"key_id": key_id, "chunk": chunk}
    )
    return decode(first, last, steps, vals, times)


def _slice(cols: Columns, lo: int, hi: int) -> list[Point]:
    """The chunk's points with lo <= step <= hi, as (step, value, ts) tuples, in step order."""
    steps = cols.steps
    i, j = bisect_left(steps, lo), bisect_right(steps, hi)
    if cols.times is None:
        return list(zip(steps[i:j], cols.values[i:j], itertools.repeat(None), strict=False))
    times = [None if t != t else t for t in cols.times[i:j]]  # NaN: no time
    return list(zip(steps[i:j], cols.values[i:j], times, strict=True))


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
    rows: list[Point] = driver_rows(conn, _ROWS_DOWN if descending else _ROWS_UP, {**where, "n": n})
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
    """(first step, last step, count) of the key's points in lo..hi; the count of the rows
    among them, and of the chunks wholly inside, is counted up to `up_to` only (enough to
    know whether a read must be downsampled)."""
    where = _where(key_id, lo, hi)
    [(first, last, count, inner_first, inner_last, inner_count)] = driver_rows(
        conn, _EXTENT, {**where, "up_to": up_to}
    )
    count = int(count or 0)
    if inner_first is not None:
        first = inner_first if first is None else min(first, inner_first)
        last = inner_last if last is None else max(last, inner_last)
        count += int(inner_count)
    for n, number, c_first, c_last, gaps in driver_rows(conn, _EDGE_CHUNKS, where):
        if c_last < lo or c_first > hi:
            continue
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
