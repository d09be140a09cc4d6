"""
Time-keyed metric points: rows logged without a step (`inference/*`, `event_loop_lag/*` sampled
every few seconds), one per (key, timestamp), never folded into a step. metrics.write_points
stores them; this module reads them. They are charted against time; a downsampled read buckets
them by equal spans of time in one pass over the range (a day of 5-second samples is 17,280
points per key, so no block summaries are kept for them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, and_, bindparam, exists, func, select

from .metric_key_ids import known_ids
from .schema import metric_keys, metric_time_points
from .sql import driver_rows

__all__ = ["key_stats", "time_points_page", "time_series"]


def key_stats(conn: Connection, run_seq: int, ids: list[int] | None = None) -> list[dict[str, Any]]:
    """The time-keyed entries of the run's keys (of those with ids `ids` when given)."""
    k, t = metric_keys, metric_time_points
    of_run = select(k.c.id).where(k.c.run_seq == run_seq)
    agg = (
        select(t.c.key_id, func.count().label("count"), func.max(t.c.ts).label("last_ts"))
        .where(t.c.key_id.in_(of_run if ids is None else ids))
        .group_by(t.c.key_id)
        .subquery()
    )
    last = metric_time_points.alias("last")
    query = (
        select(
            k.c.name.label("key"),
            agg.c.count,
            agg.c.last_ts,
            last.c.value.label("last_value"),
            k.c.step_metric,
        )
        .join(agg, agg.c.key_id == k.c.id)
        .join(last, and_(last.c.key_id == k.c.id, last.c.ts == agg.c.last_ts))
    )
    return [
        {**dict(row), "axis": "time", "last_step": None} for row in conn.execute(query).mappings()
    ]


def time_series(
    conn: Connection,
    run_seq: int,
    names: list[str] | None,
    ts_min: float | None,
    ts_max: float | None,
    max_points: int,
) -> tuple[dict[str, dict[str, list[Any]]], bool]:
    """
    ({key: {ts, value, min, max}}, downsampled) of the time-keyed points of the named keys (all
    when None) between ts_min and ts_max. With more points than `max_points` (0: no limit), the
    range is cut into `max_points` equal spans of time, each giving its last point and the min
    and max of all its points.
    """
    t = metric_time_points
    if names is None:
        query = select(metric_keys.c.name, metric_keys.c.id).where(
            metric_keys.c.run_seq == run_seq,
            exists().where(t.c.key_id == metric_keys.c.id),
        )
        ids = dict(conn.execute(query.order_by(metric_keys.c.name)).all())
    else:
        ids = known_ids(conn, run_seq, names)
    out: dict[str, dict[str, list[Any]]] = {}
    downsampled = False
    span = {
        "ts_min": -math.inf if ts_min is None else ts_min,
        "ts_max": math.inf if ts_max is None else ts_max,
    }
    for name, key_id in ids.items():
        rows = driver_rows(conn, _POINTS, {"key_id": key_id, **span})
        if not rows:
            continue
        if max_points and len(rows) > max_points:
            downsampled = True
            buckets = _time_buckets(rows, max_points)
        else:
            buckets = [(ts, v, v, v) for ts, v in rows]
        out[name] = {
            "ts": [b[0] for b in buckets],
            "value": [b[1] for b in buckets],
            "min": [b[2] for b in buckets],
            "max": [b[3] for b in buckets],
        }
    return out, downsampled


# A key's points in a time range, built once (a chart read asks it for every key of every
# run: 160 times for the compare page's first read); no bound is an infinite one.
_POINTS = (
    select(metric_time_points.c.ts, metric_time_points.c.value)
    .where(
        metric_time_points.c.key_id == bindparam("key_id"),
        metric_time_points.c.ts >= bindparam("ts_min"),
        metric_time_points.c.ts <= bindparam("ts_max"),
    )
    .order_by(metric_time_points.c.ts)
)


def _time_buckets(
    rows: Sequence[Sequence[float]], max_points: int
) -> list[tuple[float, float, float, float]]:
    """(last ts, last value, min, max) per equal span of time, for rows in time order."""
    lo, hi = rows[0][0], rows[-1][0]
    width = (hi - lo) / max_points or 1.0
    out: list[tuple[float, float, float, float]] = []
    current = -1
    for ts, value in rows:
        bucket = min(int((ts - lo) / width), max_points - 1)
        if bucket != current:
            out.append((ts, value, value, value))
            current = bucket
        else:
            _, _, vmin, vmax = out[-1]
            out[-1] = (ts, value, min(vmin, value), max(vmax, value))
    return out


def time_points_page(
    conn: Connection, key_id: int, after_ts: float, limit: int
) -> list[tuple[float, float]]:
    """(ts, value) of one key's time-keyed points after `after_ts`, in time order (exports)."""
    t = metric_time_points
    query = (
        select(t.c.ts, t.c.value)
        .where(t.c.key_id == key_id, t.c.ts > after_ts)
        .order_by(t.c.ts)
        .limit(limit)
    )
    return [(ts, value) for ts, value in conn.execute(query)]
