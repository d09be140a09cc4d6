"""
What a record is, and what openruns reads from one.

A record is a mapping, or an object with `to_record()` (verifiers Episode / Trace) or
`model_dump()` (any pydantic model). An episode is a record with a `traces` list; anything else
logged through log_traces() is a trace. Records are turned into mappings on the upload side,
never in the caller's log_* call, and the producer's objects are never mutated: stamping the run
block copies the top level (and each member trace) of the mapping it writes.
"""

from __future__ import annotations

import logging
import math
import numbers
import uuid
from collections.abc import Mapping
from typing import Any, TypeGuard

from .spec import MAX_STEP

logger = logging.getLogger("openruns")

__all__ = [
    "MetricsCleaner",
    "WithDefaults",
    "clean_finite",
    "flatten_metrics",
    "index_fields",
    "is_episode",
    "nonfinite_paths",
    "record_kind",
    "record_step",
    "stamp_run",
    "to_mapping",
    "trace_reward",
]


def to_mapping(record: Any) -> Mapping[str, Any]:
    """The JSON-ready mapping of a record. TypeError names the type when it is not a record."""
    if isinstance(record, Mapping):
        return record
    to_record = getattr(record, "to_record", None)
    if callable(to_record):
        out = to_record()
    else:
        model_dump = getattr(record, "model_dump", None)
        if not callable(model_dump):
            raise TypeError(
                f"a record must be a mapping or have to_record() / model_dump(), "
                f"got {type(record).__name__}"
            )
        out = model_dump(mode="json", exclude_none=True)
    if not isinstance(out, Mapping):
        raise TypeError(f"{type(record).__name__}.to_record() returned {type(out).__name__}")
    return out


def is_episode(record: Mapping[str, Any]) -> bool:
    return isinstance(record.get("traces"), list)


def stamp_run(record: Mapping[str, Any], run_id: str, run_type: str) -> dict[str, Any]:
    """
    A copy of `record` whose `run` block has `id` and `type` set to this run (its other keys,
    such as `name` and `work`, kept). An episode's member traces are stamped the same way, each
    from its own run block, or the episode's when it has none. A record without an `id` gets one.
    """
    out = dict(record)
    own_run = record.get("run")
    envelope_run: Mapping[str, Any] = own_run if isinstance(own_run, Mapping) else {}
    out["run"] = {**envelope_run, "id": run_id, "type": run_type}
    if "id" not in out:
        out["id"] = uuid.uuid4().hex
    traces = record.get("traces")
    if isinstance(traces, list):
        stamped = []
        for trace in traces:
            if isinstance(trace, Mapping):
                own = trace.get("run")
                base = own if isinstance(own, Mapping) else envelope_run
                trace = {**trace, "run": {**base, "id": run_id, "type": run_type}}
            stamped.append(trace)
        out["traces"] = stamped
    return out


def index_fields(record: Mapping[str, Any], fallback_step: int | None) -> dict[str, Any]:
    """
    The index row of an episode or trace: id, step, reward, env, ok, tokens, duration, kind,
    subset.

    step: `run.work.step` (the step the episode was dispatched at), else a top-level `step`,
    else `fallback_step` (the run's step when the record was logged). reward: the record's own
    `reward`, else its summary trace's (first trainable trace, else the first). kind (train |
    eval): a top-level `kind` (the producer's log call), else `run.work.type` (verifiers stamps
    the work an episode did for a training run), else the first trace's `info.kind` (prime-rl),
    else `run.type`. subset: a top-level `subset` (the cohort it was logged as: all, effective).
    """
    traces = record.get("traces") if is_episode(record) else None
    summary = _summary_trace(traces) if traces else None
    reward = _number(record.get("reward"))
    if reward is None and summary is not None:
        reward = trace_reward(summary)
    elif reward is None and traces is None:
        reward = trace_reward(record)
    tokens = _number(record.get("num_total_tokens"))
    if tokens is None and traces:
        counts = [_number(t.get("num_total_tokens")) for t in traces if isinstance(t, Mapping)]
        known = [c for c in counts if c is not None]
        tokens = sum(known) if known else None
    ok = record.get("ok")
    return {
        "id": str(record.get("id", "")),
        "step": record_step(record, fallback_step),
        "reward": reward,
        "env": _env_name(record.get("env")),
        "ok": ok if isinstance(ok, bool) else None,
        "tokens": int(tokens) if tokens is not None else None,
        "duration": _duration(traces if traces else [record]),
        "kind": record_kind(record, traces),
        "subset": _text(record.get("subset")),
    }


def record_kind(record: Mapping[str, Any], traces: list[Any] | None = None) -> str | None:
    """See index_fields: the kind of work a record did (train | eval), or None."""
    own = _text(record.get("kind"))
    if own is not None:
        return own
    run = record.get("run")
    run = run if isinstance(run, Mapping) else {}
    work = run.get("work")
    work_type = _text(work.get("type")) if isinstance(work, Mapping) else None
    if work_type is not None:
        return work_type
    if traces and isinstance(traces[0], Mapping):
        info = traces[0].get("info")
        info_kind = _text(info.get("kind")) if isinstance(info, Mapping) else None
        if info_kind is not None:
            return info_kind
    return _text(run.get("type"))


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def flatten_metrics(values: Mapping[Any, Any]) -> tuple[dict[str, float | int], dict[str, str]]:
    """
    Flatten nested mappings to `a/b` keys. Returns (numbers kept, {key: why dropped}).
    Numbers are Python numbers, numpy scalars, or 0-d arrays / tensors (`.item()`); booleans
    become 0/1. NaN and infinities are dropped, as is anything that is not a number.
    """
    kept: dict[str, float | int] = {}
    dropped: dict[str, str] = {}
    _flatten_into("", values, kept, dropped)
    return kept, dropped


class MetricsCleaner:
    """
    flatten_metrics, naming each dropped key in one warning the first time it is dropped (a NaN
    loss every step would otherwise bury the log). `dropped_values` counts every drop.
    """

    def __init__(self) -> None:
        self._named: set[str] = set()
        self.dropped_values = 0
        # (key, "nan" | "inf" | "-inf") of the keys the last clean() named for the first time
        # for a value that is not finite: the SDK reports these to the server (alerts).
        self.fresh_nonfinite: list[tuple[str, str]] = []

    def clean(self, values: Mapping[Any, Any]) -> dict[str, float | int]:
        kept, dropped = flatten_metrics(values)
        self.fresh_nonfinite = []
        if dropped:
            self.dropped_values += len(dropped)
            fresh = {k: why for k, why in dropped.items() if k not in self._named}
            self.fresh_nonfinite = [(k, why) for k, why in fresh.items() if why in NONFINITE]
            if fresh:
                self._named.update(fresh)
                logger.warning(
                    "openruns: dropped metric values that are not finite numbers: %s "
                    "(each key is named once)",
                    ", ".join(f"{k} ({why})" for k, why in fresh.items()),
                )
        return kept


NONFINITE = ("nan", "inf", "-inf")  # repr() of the values flatten_metrics drops as not finite


def _flatten_into(
    prefix: str, values: Mapping[Any, Any], kept: dict[str, float | int], dropped: dict[str, str]
) -> None:
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            _flatten_into(name + "/", value, kept, dropped)
            continue
        number = _metric_number(value)
        if number is None:
            dropped[name] = f"not a number ({type(value).__name__})"
        elif isinstance(number, float) and not math.isfinite(number):
            dropped[name] = repr(number)
        else:
            kept[name] = number


def _metric_number(value: Any) -> float | int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "ndim", None) == 0:  # 0-d numpy array, torch tensor
        try:
            return _metric_number(item())
        except (TypeError, ValueError):
            return None
    return None


def clean_finite(values: Any) -> Any:
    """Drop NaN and infinities inside mappings, lists and tuples (for summaries)."""
    if isinstance(values, float):
        return values if math.isfinite(values) else None
    if isinstance(values, Mapping):
        out = {}
        for k, v in values.items():
            cleaned = clean_finite(v)
            if cleaned is None and v is not None:
                continue
            out[k] = cleaned
        return out
    if isinstance(values, (list, tuple)):
        return [c for v in values if (c := clean_finite(v)) is not None or v is None]
    return values


def _summary_trace(traces: list[Any]) -> Mapping[str, Any] | None:
    mappings = [t for t in traces if isinstance(t, Mapping)]
    for trace in mappings:
        agent = trace.get("agent")
        if isinstance(agent, Mapping) and agent.get("trainable") is True:
            return trace
    return mappings[0] if mappings else None


def trace_reward(trace: Mapping[str, Any]) -> float | None:
    """A trace's (or chat record's) reward: its `reward`, else the sum of score × weight of its
    scored `rewards` (verifiers 0.4.0 does not serialize `Trace.reward`), else None."""
    reward = _number(trace.get("reward"))
    if reward is not None:
        return reward
    rewards = trace.get("rewards")
    if not isinstance(rewards, Mapping):
        return None
    total, seen = 0.0, False
    for item in rewards.values():
        if isinstance(item, Mapping) and _number(item.get("score")) is not None:
            weight = _number(item.get("weight"))
            total += item["score"] * (1.0 if weight is None else weight)
            seen = True
    return total if seen else None


def record_step(record: Mapping[str, Any], fallback: int | None) -> int | None:
    """`run.work.step`, else a top-level `step`, else `fallback`; a value that is not a step
    (not an int from 0 to MAX_STEP) counts as absent, so that one odd record cannot make the
    server refuse the batch it travels in."""
    run = record.get("run")
    if isinstance(run, Mapping):
        work = run.get("work")
        work_step = work.get("step") if isinstance(work, Mapping) else None
        if _is_step(work_step):
            return work_step
    step = record.get("step")
    if _is_step(step):
        return step
    return fallback


def _is_step(value: object) -> TypeGuard[int]:
    return _is_int(value) and 0 <= value <= MAX_STEP


# Lists longer than this are bulk data (token ids, logprobs, messages): not walked for NaN.
_SCAN_LIST_ITEMS = 64


def nonfinite_paths(record: Mapping[str, Any]) -> list[str]:
    """
    Paths (`reward`, `traces[].metrics/loss`) of NaN and infinite numbers in a record's own
    fields and its traces', which JSON cannot hold (they are stored as null). Bulk arrays (lists
    longer than 64 items, a trace's nodes) are not walked: a per-number pass over multi-MB
    rollouts would cost a large share of their encoding.
    """
    found: list[str] = []
    _scan(record, "", found, 0)
    return found


def _scan(value: Any, path: str, found: list[str], depth: int) -> None:
    if isinstance(value, float):
        if not math.isfinite(value):
            found.append(path or "(value)")
    elif isinstance(value, Mapping):
        if depth > 16:
            return
        for key, item in value.items():
            where = f"{path}/{key}" if path else str(key)
            if key == "traces" and isinstance(item, list):  # every trace, however many
                for trace in item:
                    _scan(trace, where + "[]", found, depth + 1)
            elif key != "nodes":
                _scan(item, where, found, depth + 1)
    elif isinstance(value, (list, tuple)) and len(value) <= _SCAN_LIST_ITEMS and depth <= 16:
        for item in value:
            _scan(item, f"{path}[]", found, depth + 1)


def _env_name(env: Any) -> str | None:
    if isinstance(env, str):
        return env or None
    if isinstance(env, Mapping):
        for key in ("id", "name"):
            name = env.get(key)
            if isinstance(name, str) and name:
                return name
    return None


def _duration(traces: list[Any]) -> float | None:
    """Seconds from the earliest `timing.start` to the latest `end` inside the traces' timing."""
    starts: list[float] = []
    ends: list[float] = []
    for trace in traces:
        timing = trace.get("timing") if isinstance(trace, Mapping) else None
        if isinstance(timing, Mapping):
            _collect_span(timing, starts, ends)
    positive = [s for s in starts if s > 0]
    if not positive or not ends:
        return None
    span = max(ends) - min(positive)
    return round(span, 6) if span >= 0 else None


def _collect_span(node: Mapping[str, Any], starts: list[float], ends: list[float]) -> None:
    for key, value in node.items():
        if isinstance(value, Mapping):
            _collect_span(value, starts, ends)
        elif key in ("start", "end") and _number(value) is not None and value > 0:
            (starts if key == "start" else ends).append(float(value))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


class WithDefaults:
    """A record with fields (kind, subset) to store when the record does not say its own; made
    into a mapping on the upload side, like any record."""

    __slots__ = ("defaults", "record")

    def __init__(self, record: Any, defaults: dict[str, str]):
        self.record = record
        self.defaults = defaults

    def to_record(self) -> Mapping[str, Any]:
        mapping = to_mapping(self.record)
        missing = {k: v for k, v in self.defaults.items() if k not in mapping}
        return {**mapping, **missing} if missing else mapping
