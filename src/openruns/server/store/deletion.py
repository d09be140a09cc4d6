"""
Deleting a run: the tombstone, then its rows removed a slice at a time (issue 22).

    tomb = mark_deleted(conn, run_seq, by, now)        # one short transaction: the run is gone
    stage = 0
    while stage < len(STAGES):                          # one transaction per slice
        stage, step = purge_step(conn, run_seq, stage, limit, now)
        ...delete step.blobs once the slice committed...
    finish_purge(conn, run_seq, removed, now)

`mark_deleted` removes the run's row (and tags) and writes its tombstone in `run_deletions`
under the run's write lock: from that commit every lookup of the run answers 404, and every
later upload to it (sql.lock_run checks the row) stores nothing. The run's rows are then
removed in slices of at most `limit` rows per transaction, so a run of ten million metric rows
never holds SQLite's one writer, or PostgreSQL's row locks, for long; readers of other runs
never wait. Each slice names the blobs its rows referenced; the caller deletes them after the
slice commits (a crash between leaves unreferenced blobs, which `openruns server check
--remove-unreferenced` removes). A purge interrupted by a crash is taken up again by any
replica once its claim (`claimed_at`) is older than PURGE_LEASE (`unpurged`); two purges of one
run only delete the same rows twice, which deletes nothing.

The run's seq is never handed out again (AUTOINCREMENT on SQLite, a sequence on PostgreSQL;
migration 0013), so rows a late writer adds, dead full-text entries, and blobs under
`runs/<seq>/` can never be taken for another run's. On SQLite the full-text index (FTS5,
contentless) cannot drop an entry without the text it indexed: a deleted run's entries stay as
dead postings that match no episode row (every search joins the index rows) and no run's scope.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
from sqlalchemy import ColumnElement, Connection, Table, and_, delete, insert, select, text, update
from sqlalchemy import tuple_ as sql_tuple

from ..errors import conflict
from .schema import (
    alert_activity,
    alert_states,
    annotations_table,
    episode_subsets,
    episodes,
    log_lines,
    log_totals,
    metric_blocks,
    metric_chunks,
    metric_keys,
    metric_points,
    metric_time_points,
    prime_objects,
    receipts,
    run_deletions,
    run_retention,
    run_tags,
    runs,
    segments,
    wandb_console,
    wandb_files,
    wandb_media,
    wandb_runs,
)
from .sql import lock_run

__all__ = [
    "PURGE_LEASE",
    "PURGE_ROWS",
    "STAGES",
    "Step",
    "finish_purge",
    "mark_deleted",
    "purge_step",
    "refuse_deleted_id",
    "tombstone",
    "unpurged",
]

PURGE_ROWS = 20_000  # rows per slice: a transaction of well under a second on either store
# A purge that made no progress for this long was interrupted (its server stopped): resumed.
PURGE_LEASE = 120.0


@dataclass
class Step:
    """What one slice removed: rows per table, and the blobs (key, bytes) its rows named."""

    rows: dict[str, int] = field(default_factory=dict)
    blobs: list[tuple[str, int]] = field(default_factory=list)


def mark_deleted(
    conn: Connection, run_seq: int, by: str | None, now: float
) -> dict[str, Any] | None:
    """Remove the run's row and tags and write its tombstone; None when it was gone already
    (another request deleted it first)."""
    lock_run(conn, run_seq, check=False)
    row = conn.execute(select(runs).where(runs.c.seq == run_seq)).mappings().first()
    if row is None:
        return None
    tomb = {
        "run_seq": run_seq,
        "team_id": row["team_id"],
        "run_id": row["id"],
        "project": row["project"],
        "name": row["name"],
        "deleted_at": now,
        "deleted_by": by,
        "claimed_at": now,
        "purged_at": None,
        "removed": "{}",
    }
    conn.execute(insert(run_deletions).values(tomb))
    conn.execute(delete(run_tags).where(run_tags.c.run_seq == run_seq))
    conn.execute(delete(runs).where(runs.c.seq == run_seq))
    return _tomb(tomb)


def tombstone(conn: Connection, team_id: str, run_id: str) -> dict[str, Any] | None:
    """The latest deletion of run `run_id` in `team_id`, if any."""
    row = (
        conn.execute(
            select(run_deletions)
            .where(run_deletions.c.team_id == team_id, run_deletions.c.run_id == run_id)
            .order_by(run_deletions.c.deleted_at.desc())
            .limit(1)
        )
        .mappings()
        .first()
    )
    return _tomb(row) if row else None


def refuse_deleted_id(conn: Connection, team_id: str, run_id: str) -> None:
    """409 naming the deletion when `run_id` of `team_id` was deleted (runs.create_run asks
    before making a new run, unless the create says `reuse_deleted_id`)."""
    tomb = tombstone(conn, team_id, run_id)
    if tomb is not None:
        when = datetime.fromtimestamp(tomb["deleted_at"], UTC).strftime("%Y-%m-%d %H:%M:%S")
        raise conflict(
            "run_deleted",
            f"run {run_id!r} was deleted at {when} UTC; its id is not reused by accident: "
            "create it with `reuse_deleted_id: true` to use it again",
        )


def unpurged(conn: Connection, now: float, lease: float = PURGE_LEASE) -> list[int]:
    """Seqs of deleted runs whose purge is unfinished and silent for `lease` seconds."""
    query = select(run_deletions.c.run_seq).where(
        run_deletions.c.purged_at.is_(None), run_deletions.c.claimed_at < now - lease
    )
    return [seq for (seq,) in conn.execute(query.order_by(run_deletions.c.run_seq))]


def purge_step(
    conn: Connection, run_seq: int, stage: int, limit: int, now: float
) -> tuple[int, Step]:
    """Remove up to `limit` of the run's rows, from STAGES[stage] on; returns the stage to go
    on from (len(STAGES): done) and what this slice removed. Renews the purge's claim."""
    conn.execute(
        update(run_deletions).where(run_deletions.c.run_seq == run_seq).values(claimed_at=now)
    )
    step = Step()
    budget = limit
    while stage < len(STAGES) and budget > 0:
        name, remove = STAGES[stage]
        weight = _WEIGHTS.get(name, 1)
        removed, finished = remove(conn, run_seq, max(1, budget // weight), step)
        if removed:
            step.rows[name] = step.rows.get(name, 0) + removed
        budget -= removed * weight
        if finished:
            stage += 1
    return stage, step


def finish_purge(conn: Connection, run_seq: int, removed: dict[str, int], now: float) -> None:
    conn.execute(
        update(run_deletions)
        .where(run_deletions.c.run_seq == run_seq)
        .values(purged_at=now, claimed_at=now, removed=orjson.dumps(removed).decode())
    )


def _tomb(row: Any) -> dict[str, Any]:
    out = dict(row)
    out["removed"] = orjson.loads(out["removed"]) if out.get("removed") else {}
    return out


# -- the stages: each removes at most `budget` rows; (removed, nothing of its kind left) -------

Remover = Callable[[Connection, int, int, Step], tuple[int, bool]]


def _delete_some(
    conn: Connection,
    table: Table,
    where: ColumnElement[bool],
    order: tuple[str, ...],
    budget: int,
) -> tuple[int, bool]:
    """Delete the first `budget` rows of `table` matching `where` in `order` (a prefix of an
    index, so the cut is one range); (rows deleted, none left)."""
    columns = [table.c[name] for name in order]
    cut = conn.execute(
        select(*columns).where(where).order_by(*columns).offset(budget - 1).limit(1)
    ).first()
    if cut is None:  # fewer than `budget` left: all of them
        return conn.execute(delete(table).where(where)).rowcount, True
    bound = columns[0] <= cut[0] if len(columns) == 1 else sql_tuple(*columns) <= tuple(cut)
    return conn.execute(delete(table).where(and_(where, bound))).rowcount, False


def _by_run(table: Table, *order: str) -> Remover:
    def remove(conn: Connection, run_seq: int, budget: int, step: Step) -> tuple[int, bool]:
        return _delete_some(conn, table, table.c.run_seq == run_seq, order, budget)

    return remove


def _with_blobs(table: Table, order: str) -> Remover:
    """Rows naming a blob (segments, Prime objects, W&B files): the blobs go into the step."""

    def remove(conn: Connection, run_seq: int, budget: int, step: Step) -> tuple[int, bool]:
        column = table.c[order]
        query = select(column, table.c.blob_key, table.c.bytes).where(table.c.run_seq == run_seq)
        rows = conn.execute(query.order_by(column).limit(budget)).all()
        if not rows:
            return 0, True
        where = and_(table.c.run_seq == run_seq, column <= rows[-1][0])
        removed = conn.execute(delete(table).where(where)).rowcount
        step.blobs.extend((key, int(size)) for _, key, size in rows)
        return removed, len(rows) < budget

    return remove


def _per_key(table: Table, *order: str) -> Remover:
    """A metric table keyed by metric key: the run's keys one after the other."""

    def remove(conn: Connection, run_seq: int, budget: int, step: Step) -> tuple[int, bool]:
        # Only the keys with rows left: one probe each, in one statement.
        left = select(table.c.key_id).where(table.c.key_id == metric_keys.c.id).exists()
        keys = select(metric_keys.c.id).where(metric_keys.c.run_seq == run_seq, left)
        total = 0
        for (key_id,) in conn.execute(keys.order_by(metric_keys.c.id)).all():
            removed, finished = _delete_some(
                conn, table, table.c.key_id == key_id, order, budget - total
            )
            total += removed
            if not finished:
                return total, False
        return total, True

    return remove


def _search_entries(conn: Connection, run_seq: int, budget: int, step: Step) -> tuple[int, bool]:
    """PostgreSQL's index rows of the run (SQLite's contentless FTS5 cannot: see the module).
    An indexer holds its episodes FOR KEY SHARE until it commits (search.add_documents), so
    once the episodes stage is done no entry of the run is still to come."""
    if conn.dialect.name != "postgresql":
        return 0, True
    removed = conn.execute(
        text(
            "DELETE FROM episode_search WHERE seq IN "
            "(SELECT seq FROM episode_search WHERE run_seq = :run ORDER BY seq LIMIT :n)"
        ),
        {"run": run_seq, "n": budget},
    ).rowcount
    return removed, removed < budget


# Rows of these tables count as this many rows against a slice's budget: a chunk holds up to
# 4,096 points (at least 256 when an upload created it), ~10 bytes each.
_WEIGHTS = {"metric_chunks": 256}

# Readers first lose the index rows (episodes, search, metric points), then what they point
# to: a read in flight finds nothing, or a blob gone (410), never a row naming a removed one.
STAGES: tuple[tuple[str, Remover], ...] = (
    ("episodes", _by_run(episodes, "seq")),
    ("episode_subsets", _by_run(episode_subsets, "stream", "episode_id", "subset")),
    ("search_entries", _search_entries),
    ("annotations", _by_run(annotations_table, "seq")),
    ("metric_points", _per_key(metric_points, "step")),
    ("metric_chunks", _per_key(metric_chunks, "chunk")),  # up to 4,096 points each (0019)
    ("metric_blocks", _per_key(metric_blocks, "level", "block")),
    ("metric_time_points", _per_key(metric_time_points, "ts")),
    ("metric_keys", _by_run(metric_keys, "id")),
    ("log_lines", _by_run(log_lines, "offset")),
    ("log_totals", _by_run(log_totals, "run_seq")),
    ("receipts", _by_run(receipts, "kind", "key")),
    ("wandb_media", _by_run(wandb_media, "id")),
    ("wandb_console", _by_run(wandb_console, "source")),
    ("wandb_runs", _by_run(wandb_runs, "run_seq")),
    # The alert evaluator's state of the run; its deliveries stay in the team's delivery log.
    ("alert_states", _by_run(alert_states, "rule_id", "subject")),
    ("alert_activity", _by_run(alert_activity, "run_seq")),
    ("run_retention", _by_run(run_retention, "run_seq")),  # what retention dropped (0018)
    ("segments", _with_blobs(segments, "id")),
    ("prime_objects", _with_blobs(prime_objects, "id")),
    ("wandb_files", _with_blobs(wandb_files, "name")),
)
