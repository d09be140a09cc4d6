"""
Metric points written: upsert per (key, step), and block summaries (read by metric_reads.py).

Writes merge per (run, step, key), last write wins, so a replayed batch changes nothing. A
point is stored as a metric_points row, or, where an upload is dense, in a chunk of packed
columns (metric_chunks.py: the rule, the format, and `read`, the one read of a key's points).
After the points of an upload are written, the summaries (count, min, max, last) of every block
they touched are rebuilt, level by level, from the level below (schema.BLOCK_SIZES); a chunk's
levels 1 to 3 are written with it.

Rows logged without a step (`inference/*` sampled every few seconds) are time-keyed points, one
per (key, timestamp), never folded into a step. They are charted against time; a downsampled
read buckets them by time in one pass over the range (a day of 5-second samples is 17,280
points per key, so no block summaries are kept for them).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable
from typing import Any, NamedTuple

import numpy as np
from sqlalchemy import (
    Connection,
    and_,
    bindparam,
    func,
    literal,
    select,
    update,
)

from ...spec import MAX_STEP  # the SDK's rule, written once
from . import alerts, metric_chunks
from .metric_key_ids import key_ids
from .schema import (
    BLOCK_SIZES,
    metric_blocks,
    metric_keys,
    metric_points,
    metric_time_points,
)
from .sql import among, executemany, upsert

__all__ = [
    "EVAL_PREFIX",
    "MAX_STEP",
    "MetricColumns",
    "MetricPoints",
    "Touched",
    "is_kind",
    "rebuild_blocks",
    "set_step_metrics",
    "write_points",
]

# Eval metrics and train metrics of one run stay apart by their keys: an online eval logs under
# `eval/` (prime-rl's `eval/<env>/...`), and `kind=eval` / `kind=train` reads select by it.
EVAL_PREFIX = "eval/"
SYSTEM_PREFIX = "system/"


class MetricPoints(dict[tuple[str, int], tuple[float, float | None]]):
    """The points of an upload: {(key, step): (value, ts)}, and in `by_time` {(key, ts): value}
    for the rows that came without a step."""

    def __init__(self) -> None:
        super().__init__()
        self.by_time: dict[tuple[str, float], float] = {}


class MetricColumns(NamedTuple):
    """Rows of an upload that share their metric names and have a step, as columns (ingest's
    fast path for dense logging): `names`, the rows' `steps` (int64) and `times` (float64,
    NaN: none; None when no row has one), and `values` (float64, one row per row, one column
    per name). In upload order: where a step comes twice, the later row wins."""

    names: tuple[str, ...]
    steps: np.ndarray
    times: np.ndarray | None
    values: np.ndarray


class Touched(dict[int, set[int]]):
    """What an upload's writes leave for `rebuild_blocks`: {key id: level-1 blocks} of the
    points written as rows, and in `chunks` {key id: chunk numbers} of the chunks written (their
    blocks up to metric_chunks.CHUNK_LEVEL are written with them)."""

    def __init__(self) -> None:
        super().__init__()
        self.chunks: dict[int, set[int]] = {}


def is_kind(name: str, kind: str | None) -> bool:
    """Whether metric `name` belongs to `kind` (eval: under EVAL_PREFIX; train: the rest)."""
    return kind is None or name.startswith(EVAL_PREFIX) == (kind == "eval")


def write_points(
    conn: Connection,
    run_seq: int,
    points: dict[tuple[str, int], tuple[float, float | None]] | MetricColumns,
    touched: Touched | None = None,
) -> int:
    """Merge {(key, step): (value, ts)}, or MetricColumns (into chunks where dense, else as
    rows: see metric_chunks) and rebuild the touched block summaries; upsert the time-keyed
    points of a MetricPoints per (key, ts). With `touched`, the summaries are not rebuilt: what
    was written is added to it for one `rebuild_blocks` after several calls. Returns the
    number of points written."""
    if isinstance(points, MetricColumns):
        return _write_columns(conn, run_seq, points, touched)
    by_time: dict[tuple[str, float], float] = getattr(points, "by_time", {})
    if not points and not by_time:
        return 0
    names = {name for name, _ in points} | {name for name, _ in by_time}
    ids = _touch_keys(conn, run_seq, names)
    if by_time:
        stmt = upsert(conn, metric_time_points, ("key_id", "ts"), ("value",))
        timed = [(ids[name], ts, value) for (name, ts), value in by_time.items()]
        executemany(conn, stmt, ("key_id", "ts", "value"), timed)
    if not points:
        return len(by_time)
    # The points by (key, chunk number): the one pass over every point, kept to a dict write.
    shift = metric_chunks.CHUNK_SHIFT
    by_name: dict[tuple[str, int], dict[int, tuple[float, float | None]]] = {}
    for (name, step), point in points.items():
        try:
            by_name[name, step >> shift][step] = point
        except KeyError:
            by_name[name, step >> shift] = {step: point}
    groups: dict[tuple[int, int], metric_chunks.Group] = {}
    highest: dict[int, int] = {}
    for (name, number), group in by_name.items():
        key_id = ids[name]
        groups[(key_id, number)] = group
        top = max(group)
        if top > highest.get(key_id, -1):
            highest[key_id] = top
    _write_groups(conn, groups, highest, touched)
    return len(points) + len(by_time)


def _write_columns(
    conn: Connection, run_seq: int, cols: MetricColumns, touched: Touched | None
) -> int:
    """MetricColumns cut into (key, chunk) groups of arrays: no per-value Python work where the
    groups are dense."""
    ids = _touch_keys(conn, run_seq, cols.names)
    steps, times, values = cols.steps, cols.times, cols.values
    if len(steps) > 1 and not bool((steps[1:] > steps[:-1]).all()):
        keep = metric_chunks.last_per_step(steps)
        steps, values = steps[keep], values[keep]
        times = None if times is None else times[keep]
    by_key = np.ascontiguousarray(values.T)  # a key's values side by side
    numbers = steps >> metric_chunks.CHUNK_SHIFT
    cuts = [0, *(np.flatnonzero(numbers[1:] != numbers[:-1]) + 1).tolist(), len(steps)]
    groups: dict[tuple[int, int], metric_chunks.Group] = {}
    for a, b in itertools.pairwise(cuts):
        number, part = int(numbers[a]), steps[a:b]
        stamps = None if times is None else times[a:b]
        for j, name in enumerate(cols.names):
            groups[(ids[name], number)] = metric_chunks.Points(part, by_key[j, a:b], stamps)
    last = int(steps[-1])
    _write_groups(conn, groups, {ids[name]: last for name in cols.names}, touched)
    return len(steps) * len(cols.names)


def _touch_keys(conn: Connection, run_seq: int, names: Iterable[str]) -> dict[str, int]:
    """{name: key id} of the keys written to, created if new; the alert evaluator told the run
    changed (the sampler's system/ rows keep coming from a hung job, so they do not count as
    the run's data: silence)."""
    names = set(names)
    data = any(not name.startswith(SYSTEM_PREFIX) for name in names)
    alerts.touch(conn, run_seq, time.time(), data=data)
    return key_ids(conn, run_seq, names, create=True)


def _write_groups(
    conn: Connection,
    groups: dict[tuple[int, int], metric_chunks.Group],
    highest: dict[int, int],
    touched: Touched | None,
) -> None:
    """Points by (key id, chunk number) into chunks where dense, the rest as rows; each key's
    last step raised to `highest`; the touched blocks rebuilt, or added to `touched`."""
    blocks = Touched() if touched is None else touched
    sparse = metric_chunks.write(conn, groups, blocks.chunks)
    size = BLOCK_SIZES[0]
    rows: list[tuple[int, int, float, float | None]] = []
    for (key_id, _), group in sparse.items():
        points = metric_chunks.dict_of(group)
        rows.extend((key_id, step, v, ts) for step, (v, ts) in points.items())
        blocks.setdefault(key_id, set()).update(step // size for step in points)
    stmt = upsert(conn, metric_points, ("key_id", "step"), ("value", "ts"))
    executemany(conn, stmt, ("key_id", "step", "value", "ts"), rows)
    _raise_last_steps(conn, highest)
    if touched is None:
        rebuild_blocks(conn, blocks)


_RAISE_LAST_STEP = (
    update(metric_keys)
    .where(metric_keys.c.id == bindparam("k"), metric_keys.c.last_step < bindparam("s"))
    .values(last_step=bindparam("s"))
)


def _raise_last_steps(conn: Connection, highest: dict[int, int]) -> None:
    """metric_keys.last_step of these keys raised to the highest step written ({key id: step}):
    points are never deleted but with their run, so the highest step only grows."""
    if highest:
        conn.execute(_RAISE_LAST_STEP, [{"k": k, "s": s} for k, s in sorted(highest.items())])


def set_step_metrics(conn: Connection, run_seq: int, axes: dict[str, str | None]) -> None:
    """Store each metric's step metric ({metric: K}, None: the step), the keys created if new:
    `define_metric(name, step_metric=K)` (issue 19)."""
    ids = key_ids(conn, run_seq, axes, create=True)
    for name, step_metric in axes.items():
        conn.execute(
            update(metric_keys).where(metric_keys.c.id == ids[name]).values(step_metric=step_metric)
        )


_BLOCK_COLUMNS = ("key_id", "level", "block", "count", "min", "max", "last_step", "last_value")
# Touched blocks of a key with at most this many untouched ones between them are summarized by
# one query (the blocks between are read too: at level 1, up to 16 x SPAN_GAP steps of points).
SPAN_GAP = 32


def rebuild_blocks(conn: Connection, touched: dict[int, set[int]]) -> None:
    """Recompute the summaries of the touched level-1 blocks ({key id: blocks}) and of their
    parents; with a Touched, also the parents of its chunks (above metric_chunks.CHUNK_LEVEL)."""
    stmt = upsert(conn, metric_blocks, _BLOCK_COLUMNS[:3], _BLOCK_COLUMNS[3:])
    chunked: dict[int, set[int]] = getattr(touched, "chunks", {})
    for level in range(1, len(BLOCK_SIZES) + 1):
        if level == metric_chunks.CHUNK_LEVEL + 1 and chunked:
            ratio = BLOCK_SIZES[level - 1] // BLOCK_SIZES[level - 2]
            touched = {k: set(blocks) for k, blocks in touched.items()}
            for key_id, numbers in chunked.items():
                touched.setdefault(key_id, set()).update(n // ratio for n in numbers)
        # Keys of one upload usually share their steps: one query per distinct block range. A
        # range may hold blocks not touched (a metric logged every 100th step touches every
        # 7th block: a query each was most of its upload's write); only the touched ones are
        # written.
        groups: dict[tuple[int, int], list[int]] = {}
        for key_id, blocks in touched.items():
            if not blocks:
                continue
            for span in _spans(sorted(blocks), SPAN_GAP):
                groups.setdefault(span, []).append(key_id)
        rows: list[tuple[Any, ...]] = []
        for (first, last), ids in groups.items():
            found = _summarize(conn, level, ids, first, last)
            rows.extend(row for row in found if row[2] in touched[row[0]])
        executemany(conn, stmt, _BLOCK_COLUMNS, rows)
        if level < len(BLOCK_SIZES):
            ratio = BLOCK_SIZES[level] // BLOCK_SIZES[level - 1]
            touched = {k: {b // ratio for b in blocks} for k, blocks in touched.items()}


def _summarize(
    conn: Connection, level: int, ids: list[int], first: int, last: int
) -> list[tuple[Any, ...]]:
    """Level-`level` summaries of blocks first..last of keys `ids`, from the level below, as
    rows of _BLOCK_COLUMNS."""
    if level == 1:
        size = BLOCK_SIZES[0]
        p = metric_points
        block = (p.c.step // size).label("block")
        agg = select(
            p.c.key_id,
            literal(level).label("level"),
            block,
            func.count().label("count"),
            func.min(p.c.value).label("min"),
            func.max(p.c.value).label("max"),
            func.max(p.c.step).label("last_step"),
        ).where(p.c.step >= first * size, p.c.step <= last * size + (size - 1))
        key_col = p.c.key_id
        below_size = 1
    else:
        ratio = BLOCK_SIZES[level - 1] // BLOCK_SIZES[level - 2]
        b = metric_blocks.alias("below")
        block = (b.c.block // ratio).label("block")
        agg = select(
            b.c.key_id,
            literal(level).label("level"),
            block,
            func.sum(b.c.count).label("count"),
            func.min(b.c.min).label("min"),
            func.max(b.c.max).label("max"),
            func.max(b.c.last_step).label("last_step"),
        ).where(
            b.c.level == level - 1,
            b.c.block >= first * ratio,
            b.c.block <= last * ratio + (ratio - 1),
        )
        key_col = b.c.key_id
        below_size = BLOCK_SIZES[level - 2]
    rows: list[tuple[Any, ...]] = []
    for clause in among(conn, key_col, ids):
        sub = agg.where(clause).group_by(key_col, block).subquery()
        if level == 1:
            p = metric_points
            query = select(sub, p.c.value).join(
                p, and_(p.c.key_id == sub.c.key_id, p.c.step == sub.c.last_step)
            )
        else:
            # The last value of the block below holding the last step (by its primary key):
            # the points below may be rows or in a chunk.
            c = metric_blocks.alias("child")
            query = select(sub, c.c.last_value).join(
                c,
                and_(
                    c.c.key_id == sub.c.key_id,
                    c.c.level == level - 1,
                    c.c.block == sub.c.last_step // below_size,
                ),
            )
        rows.extend(tuple(row) for row in conn.execute(query))
    return rows


def _spans(blocks: list[int], gap: int) -> Iterable[tuple[int, int]]:
    """Runs of a sorted list's numbers with at most `gap` numbers missing between neighbours
    (0: consecutive numbers), as (first, last)."""
    start = prev = blocks[0]
    for b in blocks[1:]:
        if b > prev + 1 + gap:
            yield start, prev
            start = b
        prev = b
    yield start, prev
