"""
What the W&B SDK streams, read into openruns' terms: pure functions, no I/O (issue 19).

    history_row('{"loss": 1, "nested": {"a": 2}, "_step": 3, "_timestamp": 1.79e9}')
      -> Row(step=3, ts=1.79e9, values={"loss": 1, "nested/a": 2}, media={})
    system_row('{"system.gpu.0.gpu": 71, "_timestamp": 1.79e9}')
      -> (1.79e9, {"system/gpu/0/gpu": 71})
    console_line('{"level": "error", "ts": "2026-12-01T10:15:30.1", "label": "rank1", ...}')
      -> {"ts": ..., "stream": "stderr", "source": "rank1", "line": ...}

- History rows: `_step` is the row's step (the SDK numbers rows itself when the script gives
  none, and joins a `commit=False` row to the next one before sending), `_timestamp` its time;
  `_runtime` and `_wandb` are the SDK's own. Nested dicts become `a/b` keys as the native SDK
  flattens them (records.flatten_metrics: booleans 0/1, non-finite and non-numeric values
  dropped). A media value (a logged wandb.Table, wandb.Image: media.is_media) is kept apart:
  its file arrives as an upload (files.py); another typed value (a histogram) is no metric.
- System rows (`wandb-events.jsonl`): W&B's `system.x.y` keys become `system/x/y`, the group
  the native sampler (openruns/system.py) logs under; a shared-mode writer's `/l:<label>`
  suffix becomes part of the key (`system/.../l:rank1`), so each writer keeps its own series.
- Console lines: the structured form (served with STRUCTURED_CONSOLE_LOGS) or the legacy one
  (`ERROR <ts> [label] text`, which `wandb sync` may send); both give time, stream and writer.
- Metric definitions: the config's `_wandb.m` list (protobuf field numbers as keys: "1" name,
  "2" glob, "4" step metric, "5" its one-based index in the list).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeGuard

import orjson

from ...records import flatten_metrics
from ...spec import MAX_STEP
from .media import is_media

__all__ = [
    "Row",
    "console_line",
    "history_row",
    "metric_definitions",
    "parse_object",
    "system_row",
    "wandb_values",
]

_SDK_KEYS = ("_step", "_timestamp", "_runtime", "_wandb")
_SYSTEM_DOT = re.compile(r"(?<=[A-Za-z0-9_])\.(?=[A-Za-z0-9_])")
_LEGACY_LINE = re.compile(
    r"^(?P<error>ERROR )?"
    r"(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)"
    r"(?: \[(?P<label>[^\]]*)\])? ?"
)


@dataclass
class Row:
    """One history row: its step, time, numeric values (flattened) and media references."""

    step: int | None
    ts: float | None
    values: dict[str, float | int]
    media: dict[str, dict[str, Any]] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)


def parse_object(text: str) -> dict[str, Any]:
    """A JSON object from the SDK; its NaN / Infinity (which the Go core writes) are read, then
    dropped with the other non-finite values. ValueError when it is not an object."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        value = json.loads(text)  # NaN, Infinity; raises ValueError when not JSON at all
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    return value


def history_row(text: str) -> Row:
    item = parse_object(text)
    step = item.get("_step")
    ts = item.get("_timestamp")
    media: dict[str, dict[str, Any]] = {}
    plain = _split_media(item, "", media)
    values, dropped = flatten_metrics(plain)
    return Row(
        step=step if _is_step(step) else None,
        ts=float(ts) if _is_finite(ts) else None,
        values=values,
        media=media,
        dropped=dropped,
    )


def _split_media(
    item: Mapping[str, Any], prefix: str, media: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """`item` without the SDK's keys (at the top) and media references (collected by key)."""
    out: dict[str, Any] = {}
    for key, value in item.items():
        if not prefix and key in _SDK_KEYS:
            continue
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            if is_media(value):
                media[name] = dict(value)
            elif "_type" not in value:  # a histogram, a plot...: not a metric, not a file
                out[key] = _split_media(value, name + "/", media)
        else:
            out[key] = value
    return out


def system_row(text: str) -> tuple[float | None, dict[str, float | int]]:
    item = parse_object(text)
    ts = item.get("_timestamp")
    renamed = {}
    for key, value in item.items():
        if key in _SDK_KEYS:
            continue
        if key.startswith("system."):
            key = "system/" + _SYSTEM_DOT.sub("/", key[len("system.") :])
        elif not key.startswith("system/"):
            key = "system/" + key
        renamed[key] = value
    values, _ = flatten_metrics(renamed)
    return (float(ts) if _is_finite(ts) else None), values


def console_line(text: str, fallback_ts: float) -> dict[str, Any]:
    """{ts, stream, source, line} of one console line as the SDK sends it."""
    if text.startswith("{"):
        try:
            item = orjson.loads(text)
        except orjson.JSONDecodeError:
            item = None
        if isinstance(item, dict) and "content" in item:
            return {
                "ts": _iso_time(item.get("ts")) or fallback_ts,
                "stream": "stderr" if item.get("level") == "error" else "stdout",
                "source": _source(item.get("label")),
                "line": str(item.get("content")),
            }
    match = _LEGACY_LINE.match(text)
    if match is None:
        return {"ts": fallback_ts, "stream": "stdout", "source": "main", "line": text}
    return {
        "ts": _iso_time(match["ts"]) or fallback_ts,
        "stream": "stderr" if match["error"] else "stdout",
        "source": _source(match["label"]),
        "line": text[match.end() :],
    }


def _source(label: object) -> str:
    return label[:128] if isinstance(label, str) and label else "main"


def _iso_time(value: object) -> float | None:
    """The SDK's timestamps: ISO 8601 without a zone, in UTC."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.rstrip("Z"))
    except ValueError:
        return None
    return parsed.replace(tzinfo=parsed.tzinfo or UTC).timestamp()


def wandb_values(config: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the run's config values, the SDK's own `_wandb` entry) of a W&B config, whose entries
    are `{"value": v, "desc": ...}`."""
    values: dict[str, Any] = {}
    own: dict[str, Any] = {}
    for key, entry in config.items():
        value = entry.get("value") if isinstance(entry, Mapping) and "value" in entry else entry
        if key == "_wandb":
            own = dict(value) if isinstance(value, Mapping) else {}
        else:
            values[key] = value
    return values, own


def metric_definitions(
    own: Mapping[str, Any],
) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """({metric: its step metric}, [(glob, step metric)]) from a config's `_wandb` entry."""
    encoded = own.get("m")
    if not isinstance(encoded, list):
        return {}, []
    names = [m.get("1") or m.get("2") if isinstance(m, Mapping) else None for m in encoded]
    exact: dict[str, str] = {}
    globs: list[tuple[str, str]] = []
    for metric in encoded:
        if not isinstance(metric, Mapping):
            continue
        step = metric.get("4")
        index = metric.get("5")
        if not step and isinstance(index, int) and 0 < index <= len(names):
            step = names[index - 1]
        if not isinstance(step, str) or not step:
            continue
        if isinstance(metric.get("1"), str) and metric["1"]:
            exact[metric["1"]] = step
        elif isinstance(metric.get("2"), str) and metric["2"]:
            globs.append((metric["2"], step))
    return exact, globs


def _is_step(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_STEP


def _is_finite(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
