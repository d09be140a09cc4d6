"""
Retention's SQL (issue 22): the runs due, the claim on a run, the index it plans from, and the
slices that rewrite or drop a segment's episodes. server/retention/reduce.py sequences them:

    runs = due_runs(conn, ended_before, after_seq, limit)       # ended runs, with their record
    if claim(conn, run_seq, rule, now):                           # one replica reduces a run
        rows = index_page(conn, run_seq, after_seq, limit)        # plan: the sample keeps some
        ...for a segment keeping some: its kept records packed into a new blob...
        new_id = move_rows(conn, run_seq, old_id, None, segment, moves, now)   # first slice
        move_rows(conn, run_seq, old_id, new_id, None, moves, now)             # the others
        drop_rows(conn, run_seq, old_id, dropped_seqs, now)                    # a slice each
        retire_segment(conn, run_seq, old_id, all_its_seqs, new_bytes, now)   # then its blob
        finish(conn, run_seq, now)

Rows are named by seq (the primary key; the episodes table has no index by segment, and a
segment's rows are all in the plan: rows are only added with their segment). Each function is
one transaction of at most SLICE_ROWS episode rows, under the run's write lock
(sql.lock_run: a run deleted meanwhile is a 404, which ends its pass). A kept row is moved to
the new segment by a compare-and-set on its old segment, so every row points at a blob that
exists at every commit: readers of the run go on throughout, and see a record either at its
old place or its new one (the old blob is deleted only after the run's pass; crash between:
`openruns server check --remove-unreferenced`). Once a segment's kept rows are moved, the
others are dropped, with their subsets, their annotations (when no stream of the run holds
the id any more) and their search entries (PostgreSQL; SQLite's contentless FTS5 keeps dead
postings that join no row, as for deleted runs: store/deletion.py).

A claim is a row of `run_retention`; a pass renews `claimed_at` with every slice, and one
silent for CLAIM_LEASE (its server stopped) is taken up by any replica's next pass. The
counts dropped add up over passes; kept counts are those after the last one. (A pass taken
up after a crash between a segment's moves and its drops finds the old segment holding only
rows to drop, and counts all its bytes as dropped: `bytes_dropped` may then exceed what went
by the kept records' share of that one segment; `bytes_kept` is always measured.)
"""

from __future__ import annotations

from typing import Any

import orjson
from sqlalchemy import Connection, bindparam, delete, func, insert, select, text, update

from ...spec import RunStatus
from .schema import (
    RECORD_LOCATION,
    annotations_table,
    episode_subsets,
    episodes,
    run_retention,
    runs,
    segments,
)
from .sql import lock_run

__all__ = [
    "CLAIM_LEASE",
    "SLICE_ROWS",
    "claim",
    "drop_rows",
    "due_runs",
    "finish",
    "index_page",
    "move_rows",
    "record",
    "retire_segment",
    "segment_rows",
    "segments_of",
]

SLICE_ROWS = 20_000  # episode rows per transaction, as deletion's purge slices
# A pass that made no progress for this long was interrupted (its server stopped): taken up.
CLAIM_LEASE = 300.0
_IN_CHUNK = 500

_e = episodes
_r = run_retention


def due_runs(
    conn: Connection, ended_before: float, after_seq: int, limit: int
) -> list[dict[str, Any]]:
    """Ended runs that finished before `ended_before`, after `after_seq` in seq order, each
    with its retention record's keep_per_step, claimed_at and reduced_at (None: never)."""
    query = (
        select(
            runs.c.seq,
            runs.c.id,
            runs.c.team_id,
            runs.c.project,
            runs.c.finished_at,
            _r.c.keep_per_step,
            _r.c.claimed_at,
            _r.c.reduced_at,
        )
        .select_from(runs.outerjoin(_r, _r.c.run_seq == runs.c.seq))
        .where(
            runs.c.seq > after_seq,
            runs.c.status != str(RunStatus.RUNNING),
            runs.c.finished_at.is_not(None),
            runs.c.finished_at < ended_before,
        )
        .order_by(runs.c.seq)
        .limit(limit)
    )
    return [dict(row) for row in conn.execute(query).mappings()]


def claim(
    conn: Connection,
    run_seq: int,
    rule: dict[str, Any],
    now: float,
    lease: float = CLAIM_LEASE,
) -> bool:
    """Take the run's reduction under `rule` for this pass: True unless it is reduced under a
    rule keeping as many already, or another pass holds it (its claim younger than `lease`).
    404 when the run was deleted."""
    lock_run(conn, run_seq)
    keep = int(rule["keep_per_step"])
    row = conn.execute(select(_r).where(_r.c.run_seq == run_seq)).mappings().first()
    values = {"rule": orjson.dumps(rule).decode(), "keep_per_step": keep, "claimed_at": now}
    if row is None:
        conn.execute(insert(_r).values(run_seq=run_seq, reduced_at=None, **values))
        return True
    if row["reduced_at"] is None and row["claimed_at"] >= now - lease:
        return False  # another pass is under way
    if row["reduced_at"] is not None and row["keep_per_step"] == keep:
        return False  # reduced under this rule already
    taken = conn.execute(
        update(_r)
        .where(_r.c.run_seq == run_seq, _r.c.claimed_at == row["claimed_at"])
        .values(reduced_at=None, **values)
    ).rowcount
    return bool(taken)


def index_page(
    conn: Connection, run_seq: int, after_seq: int, limit: int
) -> list[tuple[int, str, str | None, int | None, str, float | None, int, int]]:
    """The run's index rows after `after_seq`, in seq order: (seq, stream, kind, step,
    episode id, reward, segment id, length of the record)."""
    query = (
        select(
            _e.c.seq,
            _e.c.stream,
            _e.c.kind,
            _e.c.step,
            _e.c.episode_id,
            _e.c.reward,
            _e.c.segment_id,
            _e.c.length,
        )
        .where(_e.c.run_seq == run_seq, _e.c.seq > after_seq)
        .order_by(_e.c.seq)
        .limit(limit)
    )
    return [tuple(row) for row in conn.execute(query)]


def segments_of(conn: Connection, run_seq: int) -> dict[int, dict[str, Any]]:
    """The run's episode segments by id: stream, blob_key, bytes, records."""
    query = select(
        segments.c.id, segments.c.stream, segments.c.blob_key, segments.c.bytes, segments.c.records
    ).where(segments.c.run_seq == run_seq)
    return {row["id"]: dict(row) for row in conn.execute(query).mappings()}


def segment_rows(conn: Connection, segment_id: int, seqs: list[int]) -> list[dict[str, Any]]:
    """Where the records of the index rows `seqs` of a segment are (segment_reads.Location's
    fields), in the order of their place in the blob."""
    found: list[dict[str, Any]] = []
    for i in range(0, len(seqs), _IN_CHUNK):
        query = (
            select(
                _e.c.seq,
                _e.c.episode_id,
                *RECORD_LOCATION,
            )
            .join(segments, segments.c.id == _e.c.segment_id)
            .where(_e.c.segment_id == segment_id, _e.c.seq.in_(seqs[i : i + _IN_CHUNK]))
        )
        found.extend(dict(row) for row in conn.execute(query).mappings())
    return sorted(found, key=lambda r: (r["frame_offset"], r["offset"]))


def move_rows(
    conn: Connection,
    run_seq: int,
    old_segment: int,
    new_segment: int | None,
    segment: dict[str, Any] | None,
    moves: list[dict[str, Any]],
    now: float,
) -> int:
    """Point the index rows `moves` (seq and the new place: frame_offset, frame_length,
    offset, length, frames_digest) from `old_segment` to `new_segment`, or to a segment row
    made here from `segment` (stream, blob_key, bytes, records) when it is None; the new
    segment's id. A row no longer on `old_segment` is left as it is."""
    lock_run(conn, run_seq)
    if new_segment is None:
        assert segment is not None
        made = conn.execute(
            insert(segments).values(run_seq=run_seq, ignored=0, created_at=now, **segment)
        ).inserted_primary_key
        assert made is not None
        new_segment = int(made[0])
    if moves:
        conn.execute(
            update(_e)
            .where(_e.c.seq == bindparam("b_seq"), _e.c.segment_id == old_segment)
            .values(
                segment_id=new_segment,
                frame_offset=bindparam("b_frame_offset"),
                frame_length=bindparam("b_frame_length"),
                offset=bindparam("b_offset"),
                length=bindparam("b_length"),
                frames_digest=bindparam("b_frames_digest"),
            ),
            [{f"b_{k}": v for k, v in move.items()} for move in moves],
        )
    _renew(conn, run_seq, now)
    return new_segment


def drop_rows(conn: Connection, run_seq: int, segment_id: int, seqs: list[int], now: float) -> int:
    """Remove the index rows `seqs` still on `segment_id` (by primary key: the episodes table
    has no index by segment), with their subsets, their search entries, and the annotations of
    ids no stream of the run holds any more; how many went."""
    lock_run(conn, run_seq)
    rows: list[tuple[int, str, str]] = []
    for i in range(0, len(seqs), _IN_CHUNK):
        query = select(_e.c.seq, _e.c.stream, _e.c.episode_id).where(
            _e.c.seq.in_(seqs[i : i + _IN_CHUNK]), _e.c.segment_id == segment_id
        )
        rows.extend((seq, stream, episode_id) for seq, stream, episode_id in conn.execute(query))
    found = [seq for seq, _, _ in rows]
    removed = 0
    for i in range(0, len(found), _IN_CHUNK):
        chunk = found[i : i + _IN_CHUNK]
        removed += conn.execute(delete(_e).where(_e.c.seq.in_(chunk))).rowcount
        # After the rows: an indexer holding them (search.add_documents) has committed its
        # entries by now, so this statement sees them.
        if conn.dialect.name == "postgresql":
            conn.execute(
                text("DELETE FROM episode_search WHERE seq IN :seqs").bindparams(
                    bindparam("seqs", chunk, expanding=True)
                )
            )
    by_stream: dict[str, list[str]] = {}
    for _, stream, episode_id in rows:
        by_stream.setdefault(stream, []).append(episode_id)
    for stream, ids in by_stream.items():
        for i in range(0, len(ids), _IN_CHUNK):
            conn.execute(
                delete(episode_subsets).where(
                    episode_subsets.c.run_seq == run_seq,
                    episode_subsets.c.stream == stream,
                    episode_subsets.c.episode_id.in_(ids[i : i + _IN_CHUNK]),
                )
            )
    _drop_annotations(conn, run_seq, sorted({episode_id for _, _, episode_id in rows}))
    conn.execute(
        update(_r)
        .where(_r.c.run_seq == run_seq)
        .values(episodes_dropped=_r.c.episodes_dropped + removed, claimed_at=now)
    )
    return removed


def _drop_annotations(conn: Connection, run_seq: int, ids: list[str]) -> None:
    """The annotations of those of `ids` no stream of the run holds any more."""
    for i in range(0, len(ids), _IN_CHUNK):
        chunk = ids[i : i + _IN_CHUNK]
        held = set(
            conn.execute(
                select(_e.c.episode_id).where(_e.c.run_seq == run_seq, _e.c.episode_id.in_(chunk))
            ).scalars()
        )
        gone = [episode_id for episode_id in chunk if episode_id not in held]
        if gone:
            conn.execute(
                delete(annotations_table).where(
                    annotations_table.c.run_seq == run_seq,
                    annotations_table.c.episode_id.in_(gone),
                )
            )


def retire_segment(
    conn: Connection,
    run_seq: int,
    segment_id: int,
    seqs: list[int],
    new_bytes: int | None,
    now: float,
) -> bool:
    """Remove the segment's row once none of its index rows `seqs` (every row it had: rows
    are only ever added with their segment) points at it, counting it rewritten (its kept
    records are in a new blob of `new_bytes`) or deleted (None: nothing kept); False when
    some still do (then the row and its blob stay)."""
    lock_run(conn, run_seq)
    for i in range(0, len(seqs), _IN_CHUNK):
        left = conn.execute(
            select(_e.c.seq)
            .where(_e.c.seq.in_(seqs[i : i + _IN_CHUNK]), _e.c.segment_id == segment_id)
            .limit(1)
        ).first()
        if left is not None:
            return False
    old = conn.execute(select(segments.c.bytes).where(segments.c.id == segment_id)).scalar()
    if old is None:
        return False
    conn.execute(delete(segments).where(segments.c.id == segment_id))
    counts: dict[str, Any] = {"bytes_dropped": _r.c.bytes_dropped + (int(old) - (new_bytes or 0))}
    if new_bytes is None:
        counts["segments_deleted"] = _r.c.segments_deleted + 1
    else:
        counts["segments_rewritten"] = _r.c.segments_rewritten + 1
    conn.execute(update(_r).where(_r.c.run_seq == run_seq).values(claimed_at=now, **counts))
    return True


def finish(conn: Connection, run_seq: int, now: float) -> dict[str, Any]:
    """Mark the run's pass done, with the episodes and bytes it keeps now; the record."""
    lock_run(conn, run_seq)
    kept = conn.execute(
        select(func.count()).select_from(_e).where(_e.c.run_seq == run_seq)
    ).scalar_one()
    size = conn.execute(
        select(func.coalesce(func.sum(segments.c.bytes), 0)).where(segments.c.run_seq == run_seq)
    ).scalar_one()
    conn.execute(
        update(_r)
        .where(_r.c.run_seq == run_seq)
        .values(reduced_at=now, claimed_at=now, episodes_kept=kept, bytes_kept=int(size))
    )
    found = record(conn, run_seq)
    assert found is not None
    return found


def record(conn: Connection, run_seq: int) -> dict[str, Any] | None:
    """The run's retention record (the API's answer), or None when no pass reduced it."""
    row = conn.execute(select(_r).where(_r.c.run_seq == run_seq)).mappings().first()
    if row is None:
        return None
    out = {k: row[k] for k in row if k not in ("run_seq", "rule", "claimed_at")}
    out["rule"] = orjson.loads(row["rule"])
    return out


def _renew(conn: Connection, run_seq: int, now: float) -> None:
    conn.execute(update(_r).where(_r.c.run_seq == run_seq).values(claimed_at=now))
