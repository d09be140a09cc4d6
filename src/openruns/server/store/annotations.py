"""
Annotation rows: later facts about episodes, append-only. Functions over a Connection, called by
Store inside one read or write transaction.

Each row keeps the annotation as it was sent (`body`, JSON text) beside the columns it is found
by: the episode (and trace) it is about, its producer, and the step the episode was trained at
when the fact says so. Rows are never updated: a newer fact is a newer row, and a reader folds
them in `seq` order (newest last).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, insert, select

from .schema import annotations_table

__all__ = ["COLUMNS", "add", "of_episode", "page", "trained_steps"]

COLUMNS = ("episode_id", "trace_id", "producer", "step", "ts", "body")
_a = annotations_table


def add(conn: Connection, run_seq: int, rows: list[dict[str, Any]]) -> None:
    if rows:
        conn.execute(insert(_a), [{**r, "run_seq": run_seq} for r in rows])


def of_episode(conn: Connection, run_seq: int, episode_id: str) -> list[dict[str, Any]]:
    """Every annotation of one episode, oldest first."""
    query = (
        select(_a.c.seq, *(_a.c[c] for c in COLUMNS))
        .where(_a.c.run_seq == run_seq, _a.c.episode_id == episode_id)
        .order_by(_a.c.seq)
    )
    return [dict(r) for r in conn.execute(query).mappings()]


def page(
    conn: Connection, run_seq: int, after_seq: int, limit: int, episode_id: str | None = None
) -> list[dict[str, Any]]:
    """Annotations of a run (or of one episode) in the order they were stored."""
    query = select(_a.c.seq, *(_a.c[c] for c in COLUMNS)).where(
        _a.c.run_seq == run_seq, _a.c.seq > after_seq
    )
    if episode_id is not None:
        query = query.where(_a.c.episode_id == episode_id)
    return [dict(r) for r in conn.execute(query.order_by(_a.c.seq).limit(limit)).mappings()]


def trained_steps(rows: list[dict[str, Any]]) -> dict[str, int]:
    """{episode id: the latest step the rows say it was trained at}."""
    out: dict[str, int] = {}
    for row in rows:
        step = row["step"]
        if step is not None and step > out.get(row["episode_id"], step - 1):
            out[row["episode_id"]] = step
    return out
