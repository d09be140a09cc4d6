"""
When each step happened: (step, wall time) anchors of a run, read from the timestamps its
metric points carry, so charts can put wall time or time since the start on their x axis.

The anchors are the first point at or after each of `points` evenly spaced steps of the run's
longest metric series (one index seek each); a chart maps a step to a time by interpolating
between them.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, func, select

from .schema import BLOCK_SIZES, metric_blocks, metric_keys, metric_points

__all__ = ["timeline"]


def timeline(conn: Connection, run_seq: int, points: int) -> dict[str, list[Any]]:
    """{"step": [...], "ts": [...]} ascending by step; empty when no point has a time."""
    b, p = metric_blocks, metric_points
    longest = conn.execute(
        select(b.c.key_id)
        .where(
            b.c.level == len(BLOCK_SIZES),
            b.c.key_id.in_(select(metric_keys.c.id).where(metric_keys.c.run_seq == run_seq)),
        )
        .group_by(b.c.key_id)
        .order_by(func.sum(b.c.count).desc(), b.c.key_id)
        .limit(1)
    ).scalar_one_or_none()
    out: dict[str, list[Any]] = {"step": [], "ts": []}
    if longest is None:
        return out
    timed = (p.c.key_id == longest, p.c.ts.is_not(None))
    lo, hi = conn.execute(select(func.min(p.c.step), func.max(p.c.step)).where(*timed)).one()
    if lo is None:
        return out
    edges = sorted({lo + (hi - lo) * i // max(1, points - 1) for i in range(points)} | {hi})
    for edge in edges:
        row = conn.execute(
            select(p.c.step, p.c.ts).where(*timed, p.c.step >= edge).order_by(p.c.step).limit(1)
        ).first()
        if row is not None and (not out["step"] or row[0] > out["step"][-1]):
            out["step"].append(row[0])
            out["ts"].append(row[1])
    return out
