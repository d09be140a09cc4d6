"""
A run's metric keys one page at a time (issue 21: a run with 100,000 keys).

A page is up to `limit` keys of the run, found by a keyset over `metric_keys` (never an
offset), filtered by a substring (`q`, any case) or a prefix (exact), in one of two orders:

- "name": by name, the cursor the last name;
- "recent": the keys logged at the latest step first (`metric_keys.last_step`, kept at write
  time and indexed; keys with only time-keyed rows last), then by name; the cursor the last
  (step, name).

Each key of a page gives the entries `metric_reads.key_stats` gives it (one per axis, labelled
alike), so a key logged both ways never straddles two pages. A key with no points yet (named by
`define_metric` only) is counted but has no entry: a page may hold fewer entries than keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import ColumnElement, Connection, and_, func, literal, or_, select

from . import metric_times
from .metric_reads import TIME_KEYED_MARK, step_key_stats
from .schema import metric_keys

__all__ = ["KeyOrder", "KeyPage", "count_keys", "first_pages", "key_page"]

KeyOrder = Literal["name", "recent"]


@dataclass(frozen=True)
class KeyPage:
    """Entries of up to `limit` keys, the cursor after them (None: the last page), and how many
    keys of the run match the filter."""

    items: list[dict[str, Any]]
    after: list[Any] | None
    total: int


def count_keys(conn: Connection, run_seq: int) -> int:
    """How many metric keys the run has (either axis, or none yet)."""
    query = select(func.count()).where(metric_keys.c.run_seq == run_seq)
    return int(conn.execute(query).scalar_one())


def key_page(
    conn: Connection,
    run_seq: int,
    limit: int,
    after: list[Any] | None = None,
    q: str | None = None,
    prefix: str | None = None,
    order: KeyOrder = "name",
) -> KeyPage:
    """The page of keys after cursor `after` (a name; for "recent" a [step, name])."""
    k = metric_keys
    matches = [k.c.run_seq == run_seq, *_filters(q, prefix)]
    total = int(conn.execute(select(func.count()).where(*matches)).scalar_one())
    if order == "name":
        query = select(k.c.id, k.c.name, literal(0)).where(*matches)
        if after is not None:
            query = query.where(k.c.name > after[-1])
        query = query.order_by(k.c.name)
    else:
        step = k.c.last_step
        query = select(k.c.id, k.c.name, step).where(*matches)
        if after is not None:
            query = query.where(or_(step < after[0], and_(step == after[0], k.c.name > after[1])))
        query = query.order_by(step.desc(), k.c.name)
    rows = conn.execute(query.limit(limit + 1)).all()
    page = rows[:limit]
    cursor: list[Any] | None = None
    if len(rows) > limit:
        _, name, sort = page[-1]
        cursor = [name] if order == "name" else [int(sort), name]
    entries = _entries(conn, run_seq, [(key_id, name) for key_id, name, _ in page])
    return KeyPage(entries, cursor, total)


def first_pages(
    conn: Connection,
    run_seqs: list[int],
    limit: int,
    q: str | None = None,
    prefix: str | None = None,
    order: KeyOrder = "name",
) -> list[KeyPage]:
    """The first key_page of each run, in one read (the compare page's: 20 runs on one
    connection, not 20 reads)."""
    return [key_page(conn, seq, limit, None, q, prefix, order) for seq in run_seqs]


def _filters(q: str | None, prefix: str | None) -> list[ColumnElement[bool]]:
    name = metric_keys.c.name
    out: list[ColumnElement[bool]] = []
    if q:
        out.append(name.icontains(q, autoescape=True))
    if prefix:
        # Compared exactly (LIKE ignores case on SQLite, and a range depends on the collation).
        out.append(func.substr(name, 1, len(prefix)) == prefix)
    return out


def _entries(conn: Connection, run_seq: int, keys: list[tuple[int, str]]) -> list[dict[str, Any]]:
    """metric_reads.key_stats' entries of these keys, in their order (step entry, then time)."""
    if not keys:
        return []
    ids = [key_id for key_id, _ in keys]
    stepped = {row["key"]: row for row in step_key_stats(conn, run_seq, ids)}
    timed = {row["key"]: row for row in metric_times.key_stats(conn, run_seq, ids)}
    out: list[dict[str, Any]] = []
    for _, name in keys:
        if name in stepped:
            out.append({**stepped[name], "axis": "step", "last_ts": None, "label": name})
        if name in timed:
            label = f"{name} {TIME_KEYED_MARK}" if name in stepped else name
            out.append({**timed[name], "label": label})
    return out
