"""
The episode index: one row per stored episode or trace, pointing into its segment blob.

Listing uses keyset pages over (sort column, seq), so deep pages cost the same as the first;
the cursor carries the last row's sort value and seq. A sorted page is read in parts (the rows
with a value, then, NULLs last, those without), each walking an index in (column, seq) order:
ix_episodes_run_step for step, ix_episodes_run_reward for reward. `-reward` is
`reward` reversed, ties included (newest first), so one index serves both directions; an order
with NULLs last in one statement matched no index and sorted the whole run for every page
(30 s at 10M episodes, docs/benchmarks.md).

A step has two meanings in async RL: an episode is indexed by the step it was dispatched at,
and annotations (annotations.py) may say the step it was trained at. That second step is kept
on the index row (`trained_step`: the latest one its annotations name), set when an annotation
arrives, or when the episode arrives after its annotations, so `by="trained"` reads a step as
an index range too. A step's `off_policy` counts its episodes whose two steps differ
(dispatched at N, trained at M).

An id is one record per run and stream: a record whose id the stream already holds (a second
upload of the same episode, or a repeat inside one upload) is not indexed, so the first one
stays what every read, search and export sees (docs/decisions.md). Its bytes stay in its
segment, which counts it as `ignored`; exports read such a segment through its index rows.
Its subset is kept, though: an episode logged as `all` on arrival and again as `effective`
when trained on (prime-rl, seed 001) is a member of both cohorts (`episode_subsets`), and a
read by subset finds it under each (issue 20).
"""

from __future__ import annotations

import time
from typing import Any, Literal

from sqlalchemy import (
    Connection,
    and_,
    bindparam,
    case,
    exists,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.sql.expression import ColumnElement

from ...spec import MAX_STEPS_PAGE
from . import alerts
from .schema import RECORD_LOCATION, annotations_table, episode_subsets, episodes, segments
from .sql import among, executemany, insert_ignore, unindexed

__all__ = [
    "INDEX_COLUMNS",
    "MAX_STEPS_PAGE",
    "SORTS",
    "add_segment",
    "frame_digests",
    "list_episodes",
    "locate",
    "mark_trained",
    "page_for_export",
    "segments_of",
    "steps",
]

# The index fields a reader sees (and the export's columns), in order.
INDEX_COLUMNS = (
    "id",
    "stream",
    "step",
    "reward",
    "env",
    "ok",
    "tokens",
    "duration",
    "kind",
    "subset",
    "trained_step",
)
SORTS = {"step": ("step", False), "reward": ("reward", False), "-reward": ("reward", True)}

StepMeaning = Literal["dispatched", "trained"]

_e = episodes
_a = annotations_table
_m = episode_subsets
_INSERT = insert(_e)


_PUBLIC = (
    _e.c.episode_id.label("id"),
    _e.c.stream,
    _e.c.step,
    _e.c.reward,
    _e.c.env,
    _e.c.ok,
    _e.c.tokens,
    _e.c.duration,
    _e.c.kind,
    _e.c.subset,
    _e.c.trained_step,
)


def _filtered(query: Any, filters: dict[str, Any]) -> Any:
    """`query` restricted to the index rows matching `filters` (kind, subset, env, ok,
    episode_id; None: any)."""
    for name in ("kind", "subset", "env", "ok", "segment_id", "episode_id"):
        value = filters.get(name)
        if value is None:
            continue
        if name == "subset":  # the cohort it was logged as, or marked into later
            later = exists().where(
                _m.c.run_seq == _e.c.run_seq,
                _m.c.stream == _e.c.stream,
                _m.c.episode_id == _e.c.episode_id,
                _m.c.subset == value,
            )
            query = query.where(or_(_e.c.subset == value, later))
        else:
            query = query.where(_e.c[name] == value)
    return query


def add_segment(
    conn: Connection,
    run_seq: int,
    stream: str,
    blob_key: str,
    nbytes: int,
    rows: list[dict[str, Any]],
    now: float,
) -> int:
    """Index a segment's records, but for the ids the run's stream has already (the caller
    holds the run's lock; a repeat's new subset is kept as a membership); how many were
    indexed."""
    fresh, memberships = _new_ids(conn, run_seq, stream, rows)
    alerts.touch(conn, run_seq, now, data=True)  # the alert evaluator reads what changed
    inserted = conn.execute(
        insert(segments).values(
            run_seq=run_seq,
            stream=stream,
            blob_key=blob_key,
            records=len(rows),
            ignored=len(rows) - len(fresh),
            bytes=nbytes,
            created_at=now,
        )
    ).inserted_primary_key
    assert inserted is not None  # a single-row INSERT always has one
    segment_id = inserted[0]
    if fresh:
        # Straight to the driver (sql.executemany: one statement on PostgreSQL), not through
        # SQLAlchemy's per-row parameters: an upload indexes thousands of records.
        columns = tuple(fresh[0])
        executemany(
            conn,
            _INSERT,
            (*columns, "run_seq", "stream", "segment_id"),
            [(*(r[c] for c in columns), run_seq, stream, segment_id) for r in fresh],
        )
        _trained_already(conn, run_seq, [r["episode_id"] for r in fresh])
    if memberships:
        rows_of = [
            {"run_seq": run_seq, "stream": stream, "episode_id": e, "subset": s}
            for e, s in memberships
        ]
        conn.execute(insert_ignore(conn, _m), rows_of)
    return len(fresh)


def held_ids(conn: Connection, run_seq: int, stream: str, ids: list[str]) -> set[str]:
    """Those of `ids` the run's stream holds already."""
    return set(_held_subsets(conn, run_seq, stream, ids))


def _held_subsets(
    conn: Connection, run_seq: int, stream: str, ids: list[str]
) -> dict[str, str | None]:
    """{id: the subset it is indexed with} for those of `ids` the run's stream holds.

    The stream is matched here, not in SQL: with `stream = ?` in the query, SQLite (no ANALYZE
    statistics) took an index on (run_seq, stream, ...) and read every record of the run's
    stream for each chunk of ids, so each upload into a run cost in proportion to the run:
    340 ms a chunk at 1.76M episodes (docs/benchmarks.md, "Ten million episodes"). By
    (run_seq, episode_id) it is a probe per id."""
    ids = list(dict.fromkeys(ids))
    held: dict[str, str | None] = {}
    for clause in among(conn, _e.c.episode_id, ids):
        query = select(_e.c.episode_id, _e.c.subset, _e.c.stream).where(
            _e.c.run_seq == run_seq, clause
        )
        held.update((e, subset) for e, subset, of in conn.execute(query) if of == stream)
    return held


def _new_ids(
    conn: Connection, run_seq: int, stream: str, rows: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], set[tuple[str, str]]]:
    """The rows whose id the stream does not hold yet (the first of each id), and the (id,
    subset) pairs of the repeats that name another subset than the indexed record's."""
    held = _held_subsets(conn, run_seq, stream, [r["episode_id"] for r in rows])
    fresh = []
    memberships: set[tuple[str, str]] = set()
    for row in rows:
        episode_id, subset = row["episode_id"], row.get("subset")
        if episode_id not in held:
            held[episode_id] = subset
            fresh.append(row)
        elif subset is not None and subset != held[episode_id]:
            memberships.add((episode_id, subset))
    return fresh, memberships


def _trained_already(conn: Connection, run_seq: int, ids: list[str]) -> None:
    """Set trained_step on new index rows whose annotations arrived first (usually none)."""
    steps: dict[str, int] = {}
    for clause in among(conn, _a.c.episode_id, ids):
        query = (
            select(_a.c.episode_id, func.max(_a.c.step))
            .where(_a.c.run_seq == run_seq, clause)
            .where(_a.c.step.is_not(None))
            .group_by(_a.c.episode_id)
        )
        steps.update((episode_id, step) for episode_id, step in conn.execute(query))
    mark_trained(conn, run_seq, steps)


def mark_trained(conn: Connection, run_seq: int, steps: dict[str, int]) -> None:
    """Record that each episode of `steps` was trained at that step (a later step wins)."""
    if not steps:
        return
    stmt = (
        update(_e)
        .where(
            _e.c.run_seq == run_seq,
            _e.c.episode_id == bindparam("eid"),
            or_(_e.c.trained_step.is_(None), _e.c.trained_step < bindparam("trained")),
        )
        .values(trained_step=bindparam("trained"))
    )
    conn.execute(stmt, [{"eid": e, "trained": s} for e, s in steps.items()])


def list_episodes(
    conn: Connection,
    /,
    run_seq: int,
    *,
    stream: str,
    step: int | None,
    sort: str,
    limit: int,
    after: tuple[Any, int] | None,
    by: StepMeaning = "dispatched",
    **filters: Any,
) -> tuple[list[dict[str, Any]], tuple[Any, int] | None]:
    """
    A page of index rows and the cursor of the next page (None at the end). `step` is the step
    the episodes were dispatched at, or with `by="trained"` the one they were trained at;
    `filters`: kind, subset, env, ok.
    """
    if filters.get("episode_id") is not None:  # at most one row: no order, no next page
        return ([] if after is not None else _by_id(conn, run_seq, stream, step, by, filters)), None
    name, descending = SORTS[sort]
    col = _e.c[name]
    query = select(*_PUBLIC, col.label("_key"), _e.c.seq).where(
        _e.c.run_seq == run_seq, _e.c.stream == stream
    )
    if step is not None:
        query = query.where((_e.c.trained_step if by == "trained" else _e.c.step) == step)
    query = _filtered(query, filters)
    # A page is read in parts, each an index walk in the page's order (col, seq) (_parts).
    order = (col.desc(), _e.c.seq.desc()) if descending else (col, _e.c.seq)
    filtered = any(filters.get(name) is not None for name in _FILTERS)
    if step is None and filtered and conn.dialect.name == "sqlite":
        walk = select(col, _e.c.seq).where(_e.c.run_seq == run_seq, _e.c.stream == stream)
        rows, cursor = _scanned_page(conn, query, walk, col, order, descending, limit, after)
    else:
        rows, cursor = _page(conn, query, col, order, descending, limit, after, step)
    for row in rows:
        del row["_key"], row["seq"]
    return rows, cursor


# A run-wide page with a filter walks the index in its order and keeps the rows that match: on
# SQLite (no statistics) a rare value (env=, ok=false) passed over millions of rows before its
# page was full (5.5 s at 10M episodes). So there it walks SCAN_ROWS index entries at a time,
# and answers after SCAN_SECONDS with what it has (fewer rows than asked, even none) and a
# cursor after the last entry it walked; the next page goes on from there. PostgreSQL plans
# from its statistics: a rare value is a scan of the table (1.1 s at 10M), which windows of
# the index made 13 times slower over the whole walk (docs/decisions.md).
SCAN_ROWS = 20_000
SCAN_SECONDS = 0.25
_FILTERS = ("kind", "subset", "env", "ok")


def _parts(
    col: Any, descending: bool, after: tuple[Any, int] | None, seq: Any = _e.c.seq
) -> list[ColumnElement[bool]]:
    """What follows `after` in the page's order (col, seq), as parts each walked in that order:
    the rest of the cursor's ties, the values beyond it, then the NULLs. Each part names the
    whole order: among ties or NULLs that is seq's order, and PostgreSQL only walks the index
    under `col IS NULL` when told so. A row-value bound `(col, seq) > (?, ?)` would be one
    part, but SQLite seeks only on `col` with it (seq is its rowid), reading every tie."""
    if after is None:
        return [col.is_not(None), col.is_(None)]
    value, last = after
    seq_beyond = seq < last if descending else seq > last
    if value is None:
        return [and_(col.is_(None), seq_beyond)]
    beyond = col < value if descending else col > value
    return [and_(col == value, seq_beyond), beyond, col.is_(None)]


def _within(
    part: ColumnElement[bool], col: Any, descending: bool, end: Any, in_ties: bool
) -> list[ColumnElement[bool]]:
    """`part` up to and including the index entry `end` (col, seq), as pieces each an index
    range walked in the page's order: the values before end's, then end's ties up to its seq.
    In a part of one value's ties (or the NULLs), only the seq bound: a value bound there
    (`col = v AND col < v`) would not stop the walk through every tie."""
    value, last = end
    seq_within = _e.c.seq >= last if descending else _e.c.seq <= last
    if value is None or in_ties:
        return [and_(part, seq_within)]
    before = col > value if descending else col < value
    return [and_(part, before), and_(part, col == value, seq_within)]


def _page(
    conn: Connection,
    query: Any,
    col: Any,
    order: tuple[Any, ...],
    descending: bool,
    limit: int,
    after: tuple[Any, int] | None,
    step: int | None,
) -> tuple[list[dict[str, Any]], tuple[Any, int] | None]:
    """A page read part after part until it is full."""
    # A step's page must not seek by seq: SQLite would take a (col, seq) index (sql.unindexed).
    parts = _parts(col, descending, after, _e.c.seq if step is None else unindexed(_e.c.seq))
    if step is not None:
        # One step's rows: the step's index finds them and they are few enough to sort, in one
        # statement. Read in parts, SQLite walks the run's reward index instead (sql.unindexed).
        parts, order = [or_(*parts)], (col.is_(None), *order)
    rows: list[dict[str, Any]] = []
    for part in parts:
        if cursor := _fill(conn, query.where(part), order, rows, limit):
            return rows, cursor
    return rows, None


def _fill(
    conn: Connection, query: Any, order: tuple[Any, ...], rows: list[dict[str, Any]], limit: int
) -> tuple[Any, int] | None:
    """`query`'s rows in `order` added to `rows`, up to a page; once it is full (cut to `limit`),
    the next page's cursor."""
    statement = query.order_by(*order).limit(limit + 1 - len(rows))
    rows += [dict(r) for r in conn.execute(statement).mappings()]
    if len(rows) <= limit:
        return None
    del rows[limit:]
    return rows[-1]["_key"], rows[-1]["seq"]


def _scanned_page(
    conn: Connection,
    query: Any,
    walk: Any,
    col: Any,
    order: tuple[Any, ...],
    descending: bool,
    limit: int,
    after: tuple[Any, int] | None,
) -> tuple[list[dict[str, Any]], tuple[Any, int] | None]:
    """A filtered run-wide page: SCAN_ROWS index entries at a time, for SCAN_SECONDS. `walk`
    selects (col, seq) of the run's stream."""
    deadline = time.monotonic() + SCAN_SECONDS
    rows: list[dict[str, Any]] = []
    position = after
    while True:
        for n, part in enumerate(_parts(col, descending, position)):
            window = walk.where(part).order_by(*order).offset(SCAN_ROWS - 1).limit(1)
            end = conn.execute(window).first()
            in_ties = n == 0 and position is not None  # the cursor's ties: end is one of them
            for piece in [part] if end is None else _within(part, col, descending, end, in_ties):
                if cursor := _fill(conn, query.where(piece), order, rows, limit):
                    return rows, cursor
            if end is not None:
                position = (end[0], end[1])
                break  # on from the window's end, in parts again
        else:
            return rows, None  # every part walked to its end
        if time.monotonic() > deadline:
            return rows, position


def _by_id(
    conn: Connection,
    run_seq: int,
    stream: str,
    step: int | None,
    by: StepMeaning,
    filters: dict[str, Any],
) -> list[dict[str, Any]]:
    """The index row of one id in `stream`, if it matches. The stream is matched here, not in
    SQL: with `stream = ?` SQLite's planner (no statistics) takes an index on (run_seq, stream,
    ...) and reads the run's stream (0.2-0.5 s at 1.76M episodes), as in `_held_subsets`."""
    query = select(*_PUBLIC).where(_e.c.run_seq == run_seq)
    if step is not None:
        query = query.where((_e.c.trained_step if by == "trained" else _e.c.step) == step)
    rows = conn.execute(_filtered(query, filters)).mappings()
    return [dict(r) for r in rows if r["stream"] == stream]


def locate(conn: Connection, run_seq: int, episode_id: str) -> dict[str, Any] | None:
    """Where a record is stored, and its frames' digest. An id is indexed once per stream;
    should both streams hold it, or an older server have indexed it twice, the first stored
    answers, so what was acknowledged never changes."""
    query = (
        select(
            _e.c.episode_id,
            *RECORD_LOCATION,
        )
        .join(segments, segments.c.id == _e.c.segment_id)
        .where(_e.c.run_seq == run_seq, _e.c.episode_id == episode_id)
        .order_by(_e.c.seq)
        .limit(1)
    )
    row = conn.execute(query).mappings().first()
    return dict(row) if row else None


def steps(
    conn: Connection,
    /,
    run_seq: int,
    stream: str,
    step_min: int | None = None,
    by: StepMeaning = "dispatched",
    *,
    step_max: int | None = None,
    after: int | None = None,
    limit: int = MAX_STEPS_PAGE,
    descending: bool = False,
    **filters: Any,
) -> list[dict[str, Any]]:
    """
    Per step (dispatched at, or with `by="trained"` trained at): count, `scored` (how many
    have a reward), mean reward (of the scored ones), and `off_policy`, how many of them were
    trained at another step than they were dispatched at.

    A page of at most `limit` steps, in step order (`descending`: newest first), within
    [`step_min`, `step_max`]; the next page is asked for `after` the last step of this one. The
    records of no step come last, as a row of step None, on the page that ends the walk, when
    no bound is given. Each page aggregates only its own steps' rows, walking the step's index
    in order, so a page of a 10M-episode run costs what its steps hold (a live reader asks with
    `step_min` for what may have changed since it last looked). `filters`: kind, subset, env, ok.
    """
    trained = _e.c.trained_step
    step = _e.c.step if by == "dispatched" else trained
    moved = and_(trained.is_not(None), trained != _e.c.step)
    columns = (
        func.count().label("count"),
        func.count(_e.c.reward).label("scored"),
        func.avg(_e.c.reward).label("avg_reward"),
        func.coalesce(func.sum(case((moved, 1), else_=0)), 0).label("off_policy"),
    )
    where = (_e.c.run_seq == run_seq, _e.c.stream == stream)
    query = (
        select(step.label("step"), *columns)
        .where(*where, step.is_not(None))
        .group_by(step)
        .order_by(step.desc() if descending else step)
        .limit(limit)
    )
    if step_min is not None:
        query = query.where(step >= step_min)
    if step_max is not None:
        query = query.where(step <= step_max)
    if after is not None:
        query = query.where(step < after if descending else step > after)
    rows = [dict(r) for r in conn.execute(_filtered(query, filters)).mappings()]
    if len(rows) < limit and step_min is None and step_max is None and by == "dispatched":
        # Grouped by the step (None) so that it reads the step's index, not the run's rows.
        stepless = select(step.label("step"), *columns).where(*where, step.is_(None))
        query = _filtered(stepless.group_by(step), filters)
        rows.extend(dict(r) for r in conn.execute(query).mappings())
    return rows


def page_for_export(
    conn: Connection,
    /,
    run_seq: int,
    stream: str,
    after_seq: int,
    limit: int,
    **filters: Any,
) -> list[dict[str, Any]]:
    """Index rows in storage order with their locations and digests, for exports; `filters`:
    kind, subset, env, ok, segment_id."""
    query = (
        select(
            *_PUBLIC,
            _e.c.seq,
            *RECORD_LOCATION,
        )
        .join(segments, segments.c.id == _e.c.segment_id)
        .where(_e.c.run_seq == run_seq, _e.c.stream == stream, _e.c.seq > after_seq)
        .order_by(_e.c.seq)
        .limit(limit)
    )
    return [dict(r) for r in conn.execute(_filtered(query, filters)).mappings()]


def segments_of(conn: Connection, run_seq: int, stream: str) -> list[tuple[str, int, int, int]]:
    """(blob key, records, ignored records, segment id) of a run's segments of one stream, in
    upload order."""
    query = (
        select(segments.c.blob_key, segments.c.records, segments.c.ignored, segments.c.id)
        .where(segments.c.run_seq == run_seq, segments.c.stream == stream)
        .order_by(segments.c.id)
    )
    return [(key, records, ignored or 0, sid) for key, records, ignored, sid in conn.execute(query)]


def frame_digests(conn: Connection) -> dict[str, set[tuple[int, int, bytes]]]:
    """{segment blob key: its indexed frames (offset, length, digest)}, of every row with a
    digest (migration 0012), for `openruns server check --verify`."""
    query = (
        select(_e.c.frame_offset, _e.c.frame_length, _e.c.frames_digest, segments.c.blob_key)
        .join(segments, segments.c.id == _e.c.segment_id)
        .where(_e.c.frames_digest.is_not(None))
        .distinct()
    )
    out: dict[str, set[tuple[int, int, bytes]]] = {}
    for offset, length, digest, key in conn.execute(query):
        out.setdefault(key, set()).add((offset, length, bytes(digest)))
    return out
