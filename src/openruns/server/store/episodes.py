"""
The episode index: one row per stored episode or trace, pointing into its segment blob.

Listing uses keyset pages over (sort column, seq) with NULLs last, so deep pages cost the same
as the first; the cursor carries the last row's sort value and seq.

A step has two meanings in async RL: an episode is indexed by the step it was dispatched at,
and annotations (annotations.py) may say the step it was trained at. `by="trained"` reads a
step in the second sense; each row carries its `trained_step`, and a step's `off_policy`
counts its episodes whose two steps differ (dispatched at N, trained later).
"""

from __future__ import annotations

from typing import Any, Literal

from sqlalchemy import Connection, and_, case, func, insert, or_, select

from .schema import annotations, episodes, segments

__all__ = [
    "INDEX_COLUMNS",
    "SORTS",
    "add_segment",
    "list_episodes",
    "locate",
    "page_for_export",
    "segment_keys",
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
_a = annotations


def _trained_step() -> Any:
    """The step an episode was trained at: the latest such step its annotations name."""
    return (
        select(func.max(_a.c.step))
        .where(_a.c.run_seq == _e.c.run_seq, _a.c.episode_id == _e.c.episode_id)
        .scalar_subquery()
        .label("trained_step")
    )


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
)


def _filtered(query: Any, filters: dict[str, Any]) -> Any:
    """`query` restricted to the index rows matching `filters` (kind, subset, env, ok; None:
    any)."""
    for name in ("kind", "subset", "env", "ok"):
        value = filters.get(name)
        if value is not None:
            query = query.where(_e.c[name] == value)
    return query


def _trained_at(run_seq: int, step: int) -> Any:
    """Episode ids an annotation says were trained at `step`."""
    return select(_a.c.episode_id).where(_a.c.run_seq == run_seq, _a.c.step == step)


def add_segment(
    conn: Connection,
    run_seq: int,
    stream: str,
    blob_key: str,
    nbytes: int,
    rows: list[dict[str, Any]],
    now: float,
) -> None:
    segment_id = conn.execute(
        insert(segments).values(
            run_seq=run_seq,
            stream=stream,
            blob_key=blob_key,
            records=len(rows),
            bytes=nbytes,
            created_at=now,
        )
    ).inserted_primary_key[0]
    if rows:
        conn.execute(
            insert(episodes),
            [{**r, "run_seq": run_seq, "stream": stream, "segment_id": segment_id} for r in rows],
        )


def list_episodes(
    conn: Connection,
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
    name, descending = SORTS[sort]
    col = _e.c[name]
    query = select(*_PUBLIC, _trained_step(), col.label("_key"), _e.c.seq).where(
        _e.c.run_seq == run_seq, _e.c.stream == stream
    )
    if step is not None:
        if by == "trained":
            query = query.where(_e.c.episode_id.in_(_trained_at(run_seq, step)))
        else:
            query = query.where(_e.c.step == step)
    query = _filtered(query, filters)
    if after is not None:
        value, seq = after
        if value is None:
            query = query.where(col.is_(None), _e.c.seq > seq)
        else:
            beyond = col < value if descending else col > value
            query = query.where(
                or_(col.is_(None), beyond, and_(col == value, _e.c.seq > seq)),
            )
    order = col.desc() if descending else col.asc()
    query = query.order_by(col.is_(None), order, _e.c.seq).limit(limit + 1)
    rows = [dict(r) for r in conn.execute(query).mappings()]
    cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        cursor = (rows[-1]["_key"], rows[-1]["seq"])
    for row in rows:
        del row["_key"], row["seq"]
    return rows, cursor


def locate(conn: Connection, run_seq: int, episode_id: str) -> dict[str, Any] | None:
    """Where a record is stored (the latest one, should an id have been logged twice)."""
    query = (
        select(_e.c.frame_offset, _e.c.frame_length, _e.c.offset, _e.c.length, segments.c.blob_key)
        .join(segments, segments.c.id == _e.c.segment_id)
        .where(_e.c.run_seq == run_seq, _e.c.episode_id == episode_id)
        .order_by(_e.c.seq.desc())
        .limit(1)
    )
    row = conn.execute(query).mappings().first()
    return dict(row) if row else None


def steps(
    conn: Connection,
    run_seq: int,
    stream: str,
    step_min: int | None = None,
    by: StepMeaning = "dispatched",
    **filters: Any,
) -> list[dict[str, Any]]:
    """
    Per step (dispatched at, or with `by="trained"` trained at): count, mean reward, and
    `off_policy`, how many of them were trained at another step than they were dispatched at.
    With `step_min`, only steps >= it (no null step), so a live reader asks only for what may
    have changed since it last looked. `filters`: kind, subset, env, ok.
    """
    trained = (
        select(_a.c.episode_id, func.max(_a.c.step).label("trained_step"))
        .where(_a.c.run_seq == run_seq, _a.c.step.is_not(None))
        .group_by(_a.c.episode_id)
        .subquery()
    )
    joined = _e.join(trained, trained.c.episode_id == _e.c.episode_id, isouter=by != "trained")
    step = _e.c.step if by == "dispatched" else trained.c.trained_step
    moved = and_(trained.c.trained_step.is_not(None), trained.c.trained_step != _e.c.step)
    query = (
        select(
            step.label("step"),
            func.count().label("count"),
            func.avg(_e.c.reward).label("avg_reward"),
            func.coalesce(func.sum(case((moved, 1), else_=0)), 0).label("off_policy"),
        )
        .select_from(joined)
        .where(_e.c.run_seq == run_seq, _e.c.stream == stream)
        .group_by(step)
        .order_by(step.is_(None), step)
    )
    if step_min is not None:
        query = query.where(step >= step_min)
    query = _filtered(query, filters)
    return [dict(r) for r in conn.execute(query).mappings()]


def page_for_export(
    conn: Connection,
    run_seq: int,
    stream: str,
    after_seq: int,
    limit: int,
    **filters: Any,
) -> list[dict[str, Any]]:
    """Index rows in storage order with their locations, for exports; `filters`: kind, subset,
    env, ok."""
    query = (
        select(
            *_PUBLIC,
            _trained_step(),
            _e.c.seq,
            _e.c.frame_offset,
            _e.c.frame_length,
            _e.c.offset,
            _e.c.length,
            segments.c.blob_key,
        )
        .join(segments, segments.c.id == _e.c.segment_id)
        .where(_e.c.run_seq == run_seq, _e.c.stream == stream, _e.c.seq > after_seq)
        .order_by(_e.c.seq)
        .limit(limit)
    )
    return [dict(r) for r in conn.execute(_filtered(query, filters)).mappings()]


def segment_keys(conn: Connection, run_seq: int, stream: str) -> list[str]:
    """Blob keys of a run's segments of one stream, in upload order."""
    query = (
        select(segments.c.blob_key)
        .where(segments.c.run_seq == run_seq, segments.c.stream == stream)
        .order_by(segments.c.id)
    )
    return list(conn.execute(query).scalars())
