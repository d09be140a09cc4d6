"""Summaries computed from episodes (`openruns.metrics.from_episodes`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, TypedDict

__all__ = ["RunSummary", "from_episodes"]


class RunSummary(TypedDict):
    avg_reward: float
    avg_metrics: dict[str, float]
    avg_error: float


def from_episodes(episodes: Iterable[Any], traces: Iterable[Any] | None = None) -> RunSummary:
    """
    Averages over the episodes' trainable traces (all traces when none is trainable), plus the
    given bare `traces`: `avg_reward`, `avg_metrics` (each reward's score and each metric, by
    name) and `avg_error`, the share of episodes that are not ok. Works on verifiers objects
    and on mappings alike; non-finite values are left out of every average.
    """
    episodes = list(episodes)
    chosen: list[Any] = []
    for episode in episodes:
        members = list(_get(episode, "traces") or [])
        trainable = [t for t in members if _get(_get(t, "agent"), "trainable") is True]
        chosen.extend(trainable or members)
    chosen.extend(traces or [])

    rewards = [r for t in chosen if (r := _reward(t)) is not None]
    sums: dict[str, list[float]] = {}
    for trace in chosen:
        for name, reward in (_get(trace, "rewards") or {}).items():
            score = _finite(_get(reward, "score"))
            if score is not None:
                sums.setdefault(name, []).append(score)
        for name, value in (_get(trace, "metrics") or {}).items():
            value = _finite(value)
            if value is not None:
                sums.setdefault(name, []).append(value)
    failed = sum(1 for e in episodes if _get(e, "ok") is False)
    return {
        "avg_reward": sum(rewards) / len(rewards) if rewards else 0.0,
        "avg_metrics": {k: sum(v) / len(v) for k, v in sums.items()},
        "avg_error": failed / len(episodes) if episodes else 0.0,
    }


def _reward(trace: Any) -> float | None:
    reward = _finite(_get(trace, "reward"))
    if reward is not None:
        return reward
    total, seen = 0.0, False
    for item in (_get(trace, "rewards") or {}).values():
        score = _finite(_get(item, "score"))
        if score is not None:
            weight = _finite(_get(item, "weight"))
            total += score * (1.0 if weight is None else weight)
            seen = True
    return total if seen else None


def _get(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None
