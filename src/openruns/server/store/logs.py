"""
Console output of runs: functions over a Connection, called by Store inside one transaction.

Every line a run's processes print is a row at its byte offset in the run's whole output
(arrival order: offsets are assigned under the run's write lock). A run's output is bounded
(`max_bytes`, the server's `max_log_mib`): the first half of the bound is kept for good (the
head: how the run started), and once the stored lines exceed the bound by an eighth, the
oldest lines after the head are deleted until the rest (the tail: the latest lines) fits in
the other half. What was deleted is counted in log_totals, with the offset where the gap
begins, so a reader sees "N lines dropped here" instead of a silent jump.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, and_, func, insert, select, update

from .schema import log_lines, log_totals
from .sql import executemany

__all__ = ["append", "page", "totals"]

_l = log_lines
_t = log_totals
_COLUMNS = ("run_seq", "offset", "size", "ts", "stream", "source", "line")
_INSERT = insert(_l)


def totals(conn: Connection, run_seq: int) -> dict[str, Any]:
    """What a run's output holds: lines and bytes received, dropped, and where the gap is."""
    row = conn.execute(select(_t).where(_t.c.run_seq == run_seq)).mappings().first()
    if row is None:
        return {"lines": 0, "bytes": 0, "dropped_lines": 0, "dropped_bytes": 0, "gap_offset": None}
    return {k: v for k, v in row.items() if k != "run_seq"}


def append(
    conn: Connection, run_seq: int, rows: list[dict[str, Any]], max_bytes: int
) -> dict[str, Any]:
    """Store `rows` ({ts, stream, source, line, size}) after the run's output so far, then drop
    the oldest lines after the head if the run is over its bound. The caller holds the run's
    write lock. Returns the run's totals."""
    before = totals(conn, run_seq)
    if not rows:
        # Nothing to add: the totals row exists exactly when some output was received (every
        # line counts at least its newline), which decides insert or update below.
        return before
    offset = before["bytes"]
    values = []
    for row in rows:
        values.append(
            (run_seq, offset, row["size"], row["ts"], row["stream"], row["source"], row["line"])
        )
        offset += row["size"]
    executemany(conn, _INSERT, _COLUMNS, values)
    after = {**before, "lines": before["lines"] + len(rows), "bytes": offset}
    stored = after["bytes"] - after["dropped_bytes"]
    if max_bytes > 0 and stored > max_bytes + max_bytes // 8:
        _drop_middle(conn, run_seq, after, max_bytes)
    if before["lines"] == 0 and before["bytes"] == 0:
        conn.execute(insert(_t).values(run_seq=run_seq, **after))
    else:
        conn.execute(update(_t).where(_t.c.run_seq == run_seq).values(**after))
    return after


def _drop_middle(conn: Connection, run_seq: int, after: dict[str, Any], max_bytes: int) -> None:
    head = max_bytes // 2
    cut = after["bytes"] - (max_bytes - head)  # lines starting before this are not the tail
    middle = and_(_l.c.run_seq == run_seq, _l.c.offset >= head, _l.c.offset < cut)
    count, size, first = conn.execute(
        select(func.count(), func.coalesce(func.sum(_l.c.size), 0), func.min(_l.c.offset)).where(
            middle
        )
    ).one()
    if not count:
        return
    conn.execute(_l.delete().where(middle))
    after["dropped_lines"] += count
    after["dropped_bytes"] += size
    if after["gap_offset"] is None or first < after["gap_offset"]:
        after["gap_offset"] = first


def page(
    conn: Connection,
    run_seq: int,
    *,
    stream: str | None = None,
    source: str | None = None,
    after: int | None = None,
    before: int | None = None,
    limit: int = 1000,
    newest: bool = False,
) -> list[dict[str, Any]]:
    """Lines in offset order between `after` and `before` (both exclusive): the oldest `limit`
    of them, or with `newest` the newest `limit` (the tail; with `before`: the page above)."""
    query = select(_l.c.offset, _l.c.ts, _l.c.stream, _l.c.source, _l.c.line).where(
        _l.c.run_seq == run_seq
    )
    for column, value in (("stream", stream), ("source", source)):
        if value is not None:
            query = query.where(_l.c[column] == value)
    if after is not None:
        query = query.where(_l.c.offset > after)
    if before is not None:
        query = query.where(_l.c.offset < before)
    if newest:
        rows = conn.execute(query.order_by(_l.c.offset.desc()).limit(limit)).mappings().all()
        return [dict(r) for r in reversed(rows)]
    return [dict(r) for r in conn.execute(query.order_by(_l.c.offset).limit(limit)).mappings()]
