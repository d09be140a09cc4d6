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

from ...spec import MAX_STEP
from . import metric_chunks
from .schema import BLOCK_SIZES, metric_blocks, metric_keys

__all__ = ["timeline"]


def timeline(conn: Connection, run_seq: int, points: int) -> dict[str, list[Any]]:
    """{"step": [...], "ts": [...]} ascending by step; empty when no point has a time."""
    b = metric_blocks
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
    first = metric_chunks.first_timed(conn, longest, 0, MAX_STEP)
    last = metric_chunks.first_timed(conn, longest, 0, MAX_STEP, descending=True)
    if first is None or last is None:
        return out
    lo, hi = first[0], last[0]
    edges = sorted({lo + (hi - lo) * i // max(1, points - 1) for i in range(points)} | {hi})
    for edge in edges:
        row = metric_chunks.first_timed(conn, longest, edge, MAX_STEP)
        if row is not None and (not out["step"] or row[0] > out["step"][-1]):
            out["step"].append(row[0])
            out["ts"].append(row[1])
    return out
