"""
Reward distributions from the episode index: the rewards of one step (for its histogram), and
per-step quantiles over a run (the bands drawn behind the reward chart).

Both read (step, reward) through the index on (run, stream, step, reward), so the rows come
sorted and no record is opened. Quantiles interpolate linearly between order statistics (as
numpy's default); a step without rewards has no row.
"""

from __future__ import annotations

import math
from typing import Any

from sqlalchemy import Connection, func, select

from .schema import episodes
from .sql import unindexed

__all__ = ["QUANTILES", "quantile", "reward_quantiles", "step_rewards"]

QUANTILES = (0.1, 0.5, 0.9)
MAX_STEP_VALUES = 100_000

_e = episodes


def step_rewards(
    conn: Connection,
    run_seq: int,
    stream: str,
    step: int,
    by: str = "dispatched",
    kind: str | None = None,
    subset: str | None = None,
) -> dict[str, Any]:
    """{"values": the step's rewards in ascending order (at most MAX_STEP_VALUES), "missing":
    records of the step without a reward, "truncated": whether values were cut}. The step is
    the one records were dispatched at, or with `by="trained"` trained at; `kind` and `subset`
    narrow the records to one kind (train, eval) and cohort."""
    step_column = _e.c.step if by == "dispatched" else _e.c.trained_step
    where = [_e.c.run_seq == run_seq, _e.c.stream == stream, step_column == step]
    if kind is not None:
        where.append(_e.c.kind == kind)
    if subset is not None:
        where.append(_e.c.subset == subset)
    # The step's rows, found by the step's index and sorted: no reward term may choose the
    # run's reward index instead (sql.unindexed).
    reward = unindexed(_e.c.reward)
    query = (
        select(_e.c.reward)
        .where(*where, reward.is_not(None))
        .order_by(reward)
        .limit(MAX_STEP_VALUES + 1)
    )
    values = list(conn.execute(query).scalars())
    missing = conn.execute(select(func.count()).where(*where, reward.is_(None))).scalar_one()
    return {
        "values": values[:MAX_STEP_VALUES],
        "missing": missing,
        "truncated": len(values) > MAX_STEP_VALUES,
    }


def reward_quantiles(
    conn: Connection,
    run_seq: int,
    stream: str,
    step_min: int | None,
    step_max: int | None,
    max_points: int,
    kind: str | None = None,
) -> dict[str, list[Any]]:
    """Per step (or per bucket of consecutive steps when a run has more than `max_points`
    steps with rewards): the last step, how many rewards, their mean, p10, p50, p90; of the
    records of one kind (train, eval) when `kind` is given."""
    where = [_e.c.run_seq == run_seq, _e.c.stream == stream, _e.c.reward.is_not(None)]
    if kind is not None:
        where.append(_e.c.kind == kind)
    where.append(_e.c.step.is_not(None))
    if step_min is not None:
        where.append(_e.c.step >= step_min)
    if step_max is not None:
        where.append(_e.c.step <= step_max)
    steps = conn.execute(
        select(
            func.min(_e.c.step), func.max(_e.c.step), func.count(func.distinct(_e.c.step))
        ).where(*where)
    ).one()
    out: dict[str, list[Any]] = {k: [] for k in ("step", "count", "mean", "p10", "p50", "p90")}
    if not steps[2]:
        return out
    lo, hi, distinct = steps
    width = 1 if distinct <= max_points else math.ceil((hi - lo + 1) / max_points)
    query = select(_e.c.step, _e.c.reward).where(*where).order_by(_e.c.step, _e.c.reward)
    bucket: list[float] = []
    current: int | None = None
    last_step = lo

    def close() -> None:
        values = sorted(bucket) if width > 1 else bucket
        out["step"].append(last_step)
        out["count"].append(len(values))
        out["mean"].append(math.fsum(values) / len(values))
        for q in QUANTILES:
            out[f"p{round(q * 100)}"].append(quantile(values, q))

    for step, reward in conn.execute(query):
        index = (step - lo) // width
        if current is not None and index != current:
            close()
            bucket = []
        current = index
        last_step = step
        bucket.append(reward)
    if bucket:
        close()
    return out


def quantile(sorted_values: list[float], q: float) -> float:
    """The q-quantile of ascending values, interpolated linearly between neighbours."""
    position = q * (len(sorted_values) - 1)
    below = math.floor(position)
    above = min(below + 1, len(sorted_values) - 1)
    fraction = position - below
    return sorted_values[below] + (sorted_values[above] - sorted_values[below]) * fraction
