"""
Metric series and key statistics, read: the step-keyed side (time-keyed points are
metric_times.py's), written by metrics.py.

A downsampled read covers [lo, hi] with the coarsest blocks that fit inside it and finer blocks
(down to single points) at its edges, then folds those into buckets of `width` steps (a
multiple of the block size, so no block straddles two buckets): per bucket the last value and
its step, and the min and max of every point in it. A 1,000,000-step series at 1000 points reads
about 4000 block rows instead of a million points.
"""

from __future__ import annotations

import math
from typing import Any

from sqlalchemy import Connection, and_, bindparam, func, or_, select

from ...spec import MAX_STEP
from . import metric_chunks, metric_times
from .metric_key_ids import known_ids
from .schema import BLOCK_SIZES, metric_blocks, metric_keys, metric_points
from .schema import metric_chunks as chunks_table
from .sql import driver_rows

__all__ = [
    "TIME_KEYED_MARK",
    "key_stats",
    "points_page",
    "series",
    "series_of_runs",
    "step_key_stats",
]

# (count, min, max, last_step, last_value): a block, or a single point (count 1).
Summary = metric_chunks.Summary

TIME_KEYED_MARK = "(by time)"  # the label's mark of a key's time-keyed entry


def key_stats(conn: Connection, run_seq: int) -> list[dict[str, Any]]:
    """
    [{key, label, axis, last_step, last_value, count, last_ts}] of every metric key of a run,
    by key name: `axis` "step" for its step-keyed points, then "time" (last_step null, last_ts
    set) for its time-keyed ones; a key logged both ways has both entries, told apart by
    `label`: the key, and "<key> (by time)" for the time-keyed entry of such a key (issue 24:
    two entries named alike).
    """
    stepped = [{**row, "axis": "step", "last_ts": None} for row in step_key_stats(conn, run_seq)]
    timed = metric_times.key_stats(conn, run_seq)
    both = {row["key"] for row in stepped}
    for row in stepped:
        row["label"] = row["key"]
    for row in timed:
        row["label"] = f"{row['key']} {TIME_KEYED_MARK}" if row["key"] in both else row["key"]
    return sorted(stepped + timed, key=lambda r: (r["key"], r["axis"]))


def step_key_stats(
    conn: Connection, run_seq: int, ids: list[int] | None = None
) -> list[dict[str, Any]]:
    """{key, last_step, last_value, count, step_metric} of the run's keys with step-keyed
    points (of those with ids `ids` when given), by name."""
    top = len(BLOCK_SIZES)
    k, b, p, c = metric_keys, metric_blocks, metric_points, chunks_table
    of_run = select(k.c.id).where(k.c.run_seq == run_seq)
    agg = (
        select(
            b.c.key_id,
            func.sum(b.c.count).label("count"),
            func.max(b.c.last_step).label("last_step"),
        )
        .where(b.c.level == top, b.c.key_id.in_(of_run if ids is None else ids))
        .group_by(b.c.key_id)
        .subquery()
    )
    query = (
        select(
            k.c.name.label("key"),
            agg.c.last_step,
            func.coalesce(p.c.value, c.c.last_value).label("last_value"),
            agg.c.count,
            k.c.step_metric,
        )
        .join(agg, agg.c.key_id == k.c.id)
        # The last point is a row or a chunk's last (metric_chunks: never both).
        .outerjoin(p, and_(p.c.key_id == k.c.id, p.c.step == agg.c.last_step))
        .outerjoin(
            c,
            and_(
                c.c.key_id == k.c.id,
                c.c.chunk == agg.c.last_step // metric_chunks.CHUNK_STEPS,
                c.c.last_step == agg.c.last_step,
            ),
        )
        .where(or_(p.c.value.is_not(None), c.c.last_value.is_not(None)))
        .order_by(k.c.name)
    )
    return [dict(row) for row in conn.execute(query).mappings()]


def series(
    conn: Connection,
    run_seq: int,
    names: list[str] | None,
    step_min: int,
    step_max: int,
    max_points: int,
) -> tuple[dict[str, dict[str, list[Any]]], bool]:
    """
    ({key: {step, value, min, max}}, downsampled) for the named keys (all keys with step-keyed
    points when None; unknown names are left out) over steps step_min..step_max. max_points=0:
    every point.
    """
    if names is None:
        # The keys with step-keyed points (rows or chunks): last_step is -1 until one is written.
        query = select(metric_keys.c.name, metric_keys.c.id).where(
            metric_keys.c.run_seq == run_seq, metric_keys.c.last_step >= 0
        )
        ids = dict(conn.execute(query.order_by(metric_keys.c.name)).all())
    else:
        ids = known_ids(conn, run_seq, names)
    out: dict[str, dict[str, list[Any]]] = {}
    downsampled = False
    for name, key_id in ids.items():
        summaries, bucketed = _series(conn, key_id, step_min, step_max, max_points)
        downsampled |= bucketed
        out[name] = {
            "step": [s[3] for s in summaries],
            "value": [s[4] for s in summaries],
            "min": [s[1] for s in summaries],
            "max": [s[2] for s in summaries],
        }
    return out, downsampled


def series_of_runs(
    conn: Connection,
    run_seqs: list[int],
    names: list[str] | None,
    step_min: int,
    step_max: int,
    ts_min: float | None,
    ts_max: float | None,
    max_points: int,
) -> list[dict[str, Any]]:
    """Per run, in order, the answer of a metrics read ({series, downsampled, time}) for the
    named keys (every key when None), all in one transaction: one run's read, or the compare
    page's read of several runs in one request."""
    out = []
    for run_seq in run_seqs:
        by_step, downsampled = series(conn, run_seq, names, step_min, step_max, max_points)
        timed, timed_downsampled = metric_times.time_series(
            conn, run_seq, names, ts_min, ts_max, max_points
        )
        out.append(
            {"series": by_step, "downsampled": downsampled or timed_downsampled, "time": timed}
        )
    return out


# The read path's statements, built once: building and keying a select per query cost as much
# as SQLite's own work for a 391-row series (issue 21: 400 series on the compare page). The
# points themselves (rows and chunks) are read by metric_chunks.
_b = metric_blocks
_BLOCKS = (
    select(_b.c.count, _b.c.min, _b.c.max, _b.c.last_step, _b.c.last_value)
    .where(
        _b.c.key_id == bindparam("key_id"),
        _b.c.level == bindparam("level"),
        _b.c.block >= bindparam("first"),
        _b.c.block < bindparam("end"),
    )
    .order_by(_b.c.block)
)


def _series(
    conn: Connection, key_id: int, step_min: int, step_max: int, max_points: int
) -> tuple[list[Summary], bool]:
    if max_points:
        lo, hi, count = metric_chunks.extent(conn, key_id, step_min, step_max, max_points + 1)
        # Fewer steps in range than max_points: fewer points too.
        if lo is not None and hi is not None and hi - lo + 1 > max_points and count > max_points:
            return _downsample(conn, key_id, lo, hi, max_points), True
    return _points(conn, key_id, step_min, step_max), False


def _points(conn: Connection, key_id: int, lo: int, hi: int) -> list[Summary]:
    return [(1, v, v, s, v) for s, v, _ in metric_chunks.read(conn, key_id, lo, hi)]


def _downsample(conn: Connection, key_id: int, lo: int, hi: int, max_points: int) -> list[Summary]:
    span = hi - lo + 1
    level = 0
    # The coarsest blocks at most twice a bucket's ideal width (span / max_points): at most
    # ~8 x max_points rows read, for at least half as many buckets as asked (issue 21: a
    # 529 px chart of 100,000 steps read 6,250 rows of 16-step blocks a key, ~30 ms; 391 rows
    # of 256-step blocks, ~5 ms, for 391 buckets, each min and max exact).
    while level < len(BLOCK_SIZES) and BLOCK_SIZES[level] <= 2 * span / max_points:
        level += 1
    unit = BLOCK_SIZES[level - 1] if level else 1
    if max_points == 1:
        width = hi + 1
    else:
        # Buckets are aligned to multiples of `width` (so blocks never straddle one); with
        # (hi - lo + 1) / width <= max_points - 1 there are at most max_points of them.
        width = unit * math.ceil(math.ceil(span / (max_points - 1)) / unit)
    out: list[Summary] = []
    current = -1
    for count, vmin, vmax, last_step, last_value in _cover(conn, key_id, lo, hi, level):
        bucket = last_step // width
        if bucket != current:
            out.append((count, vmin, vmax, last_step, last_value))
            current = bucket
        else:
            c, mn, mx, _, _ = out[-1]
            out[-1] = (c + count, min(mn, vmin), max(mx, vmax), last_step, last_value)
    return out


def _cover(conn: Connection, key_id: int, lo: int, hi: int, level: int) -> list[Summary]:
    """Summaries covering exactly steps lo..hi, in step order: level-`level` blocks inside the
    range, finer ones at its edges."""
    if level == 0:
        return _points(conn, key_id, lo, hi)
    size = BLOCK_SIZES[level - 1]
    first = -(-lo // size)  # first block starting at or after lo
    end = (hi + 1) // size  # blocks before this one end at or before hi
    if first >= end:
        return _cover(conn, key_id, lo, hi, level - 1)
    blocks: list[Summary]
    if level == 1:  # a chunk's level-1 blocks are derived from it
        blocks = metric_chunks.level_one(conn, key_id, first, end)
    else:
        # With the block that straddles hi: when no step of it is past hi (its last step,
        # as a read up to a series' last point finds its last block), it is taken whole,
        # and the range's last steps need not come from the level below (a key's last
        # chunk, decoded, for a dense key: a third of a cold chart read's pages).
        where = {"key_id": key_id, "level": level, "first": first, "end": end + 1}
        blocks = driver_rows(conn, _BLOCKS, where)
        if blocks and blocks[-1][3] >= end * size:  # the straddling block
            if blocks[-1][3] <= hi:
                end = (hi // size) + 1  # covered to hi
            else:
                blocks.pop()
    head = _cover(conn, key_id, lo, first * size - 1, level - 1) if lo < first * size else []
    tail = _cover(conn, key_id, end * size, hi, level - 1) if end * size <= hi else []
    return head + blocks + tail


def points_page(
    conn: Connection, key_id: int, after_step: int, limit: int
) -> list[tuple[int, float, float | None]]:
    """(step, value, ts) of one key after `after_step`, in step order (for exports)."""
    if after_step >= MAX_STEP:
        return []
    return metric_chunks.read(conn, key_id, after_step + 1, MAX_STEP, limit)
