"""
Episodes projected onto the Prime platform's legacy sample tables, as prime-runs 0.1.4's
`projection` module does (same names, same rows, same bytes of JSON), for code that imports
them from the SDK (verifiers re-exports `build_samples`; prime-rl calls it):

- the eval sample row (`trace_to_sample`, `episode_to_samples`, `build_samples`): one row per
  episode, the summary trace projected, the whole episode in `info.native_wrapper`; one row
  per trace when that would pass `MAX_SAMPLES_PAYLOAD_BYTES`;
- the training-samples Parquet table (`train_sample_schema`, `episodes_to_parquet_bytes`):
  one row per episode of a step. pyarrow comes with the `train` extra and is imported only
  when a table is built.

Records are duck-typed on the attributes verifiers' Episode and Trace objects have (episode
`id`, `traces`, `env.id`, `to_record()`; trace `id`, `task.data`, `agent`, `branches`, `tools`,
`reward`, `rewards`, `timing`, `metrics`, `info`, ...). Non-finite numbers become null.
"""

from __future__ import annotations

import io
import json
import logging
import math
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

logger = logging.getLogger("openruns")

__all__ = [
    "MAX_SAMPLES_PAYLOAD_BYTES",
    "batch_samples",
    "build_samples",
    "episode_to_samples",
    "episodes_to_parquet_bytes",
    "parquet_available",
    "summary_trace_index",
    "train_sample_schema",
    "trace_to_sample",
]

# The platform's ceiling on one POST /evaluations/{id}/samples request.
MAX_SAMPLES_PAYLOAD_BYTES = 25 * 1024 * 1024
_ENVELOPE_BYTES = len(b'{"samples":[]}')


def summary_trace_index(episode: Any) -> int:
    """The trace that stands for the episode: the first trainable one, else the first."""
    for index, trace in enumerate(episode.traces):
        if trace.agent.trainable:
            return index
    return 0


def trace_to_sample(
    trace: Any, rollout_number: int = 1, episode_id: str | None = None
) -> dict[str, Any]:
    """One trace as an eval sample row: the final branch as `completion`, every branch in
    `trajectory`, each named sub-reward also as a top-level key (never over a field)."""
    task = _dump(trace.task.data)
    branches = trace.branches
    row: dict[str, Any] = {
        "sample_id": trace.id,
        "example_id": trace.task.data.idx,
        "rollout_number": rollout_number,
        "episode_id": episode_id,
        "agent": trace.agent.name,
        "trainable": trace.agent.trainable,
        "task": task,
        "prompt": [],
        "completion": _dump_all(branches[-1].messages) if branches else [],
        "answer": task.get("answer"),
        "tool_defs": _dump_all(trace.tools) if trace.tools else None,
        "reward": trace.reward,
        "timing": _dump(trace.timing),
        "is_completed": trace.is_completed,
        "is_truncated": trace.is_truncated,
        "metrics": trace.metrics,
        "error": _dump(trace.last_error) if trace.last_error else None,
        "stop_condition": trace.stop_condition,
        "trajectory": [
            {
                "messages": _dump_all(branch.messages),
                "num_input_tokens": branch.num_input_tokens,
                "num_output_tokens": branch.num_output_tokens,
            }
            for branch in branches
        ],
        "token_usage": _dump(trace.usage) if trace.usage else None,
        "info": dict(trace.info) or None,
    }
    for name, reward in trace.rewards.items():
        if reward is not None:
            row.setdefault(name, reward.score)
    finite: dict[str, Any] = _finite(row)
    return finite


def episode_to_samples(episode: Any, rollout_number: int) -> list[dict[str, Any]]:
    """The episode's row (its summary trace, the whole episode in `info.native_wrapper`), or
    one row per trace when that row would not fit in one samples request."""
    if not episode.traces:
        return []
    index = summary_trace_index(episode)
    row = trace_to_sample(episode.traces[index], rollout_number, episode.id)
    row["sample_id"] = episode.id
    row["info"] = _finite(
        {**(row["info"] or {}), "native_wrapper": episode.to_record(), "native_trace_index": index}
    )
    if _ENVELOPE_BYTES + len(_wire_json(row)) <= MAX_SAMPLES_PAYLOAD_BYTES:
        return [row]
    logger.warning(
        "openruns: episode %s is over the %d-byte sample limit; projecting each trace instead",
        episode.id,
        MAX_SAMPLES_PAYLOAD_BYTES,
    )
    return [trace_to_sample(trace, rollout_number, episode.id) for trace in episode.traces]


def build_samples(
    episodes: Iterable[Any], rollout_numbers: dict[Any, int] | None = None
) -> list[dict[str, Any]]:
    """Rows for `episodes`. `rollout_number` counts episodes per example from 1; pass the same
    `rollout_numbers` dict on every call of a run to keep counting across calls."""
    counts = rollout_numbers if rollout_numbers is not None else {}
    rows: list[dict[str, Any]] = []
    for episode in episodes:
        if not episode.traces:
            continue
        example = episode.traces[summary_trace_index(episode)].task.data.idx
        counts[example] = counts.get(example, 0) + 1
        rows.extend(episode_to_samples(episode, counts[example]))
    return rows


def batch_samples(samples: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Rows split into requests of at most MAX_SAMPLES_PAYLOAD_BYTES; a row too big to send
    alone raises ValueError."""
    batches: list[list[dict[str, Any]]] = []
    batch: list[dict[str, Any]] = []
    size = _ENVELOPE_BYTES
    for index, row in enumerate(samples):
        row_bytes = len(_wire_json(row))
        if _ENVELOPE_BYTES + row_bytes > MAX_SAMPLES_PAYLOAD_BYTES:
            raise ValueError(
                f"sample {index} is too large to upload "
                f"({_ENVELOPE_BYTES + row_bytes} > {MAX_SAMPLES_PAYLOAD_BYTES} bytes)"
            )
        grown = size + row_bytes + (1 if batch else 0)  # + the comma joining it
        if batch and grown > MAX_SAMPLES_PAYLOAD_BYTES:
            batches.append(batch)
            batch, grown = [], _ENVELOPE_BYTES + row_bytes
        batch.append(row)
        size = grown
    if batch:
        batches.append(batch)
    return batches


def parquet_available() -> bool:
    """Whether pyarrow (the `train` extra) is installed."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def train_sample_schema() -> Any:
    """The Arrow schema of the training-samples table, columns in the platform's order."""
    import pyarrow as pa

    text, integer, real = pa.string(), pa.int64(), pa.float64()
    columns: list[tuple[str, pa.DataType]] = [
        ("run_id", text),
        ("step", integer),
        ("tag", text),
        ("problem_id", integer),
        ("sample_id", integer),
        ("prompt", text),
        ("completion", text),
        ("trajectory", text),
        ("answer", text),
        ("env_name", text),
        ("task", text),
        ("info", text),
        ("reward", real),
        ("advantage", real),
        ("metrics", text),
        ("timing", text),
        ("num_input_tokens", integer),
        ("num_output_tokens", integer),
        ("created_at", pa.timestamp("us", tz="UTC")),
    ]
    return pa.schema(columns)


def episodes_to_parquet_bytes(
    episodes: Sequence[Any], run_id: str, step: int, *, sample_id_offset: int = 0
) -> bytes | None:
    """
    One step's episodes as a training-samples Parquet file (snappy, dictionary-encoded, with
    statistics): one row per episode with a trajectory, `sample_id` counting from
    `sample_id_offset`. None when no episode has a trajectory.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    advantages: dict[Any, Any] = {}
    env_names: dict[Any, str] = {}
    for episode in episodes:
        if episode.traces:
            summary = episode.traces[summary_trace_index(episode)]
            advantages[episode.id] = (summary.info or {}).get("advantage")
            env_names[episode.id] = str(getattr(getattr(episode, "env", None), "id", None) or "")
    now = datetime.now(UTC)
    rows = []
    for sample_id, sample in enumerate(build_samples(episodes), start=sample_id_offset):
        if not sample["trajectory"]:
            continue
        advantage = advantages.get(sample["episode_id"])
        trajectory = [{**branch, "advantage": advantage} for branch in sample["trajectory"]]
        rows.append(
            {
                "run_id": run_id,
                "step": step,
                "tag": "",
                "problem_id": _problem_id(sample["example_id"], sample_id),
                "sample_id": sample_id,
                "prompt": "",
                "completion": _json_column(sample["completion"]),
                "trajectory": _json_column(trajectory),
                "answer": "",
                "env_name": env_names.get(sample["episode_id"], ""),
                "task": _json_column(sample["task"]),
                "info": _json_column(sample["info"]),
                "reward": sample["reward"],
                "advantage": advantage,
                "metrics": _json_column(sample["metrics"]),
                "timing": _json_column(sample["timing"]),
                "num_input_tokens": trajectory[-1]["num_input_tokens"],
                "num_output_tokens": trajectory[-1]["num_output_tokens"],
                "created_at": now,
            }
        )
    if not rows:
        return None
    out = io.BytesIO()
    pq.write_table(
        pa.Table.from_pylist(rows, schema=train_sample_schema()),
        out,
        compression="snappy",
        use_dictionary=True,
        write_statistics=True,
    )
    return out.getvalue()


def _problem_id(example_id: Any, sample_id: int) -> int:
    if example_id is None:
        return sample_id
    try:
        return int(example_id)
    except (TypeError, ValueError):
        return sample_id


def _dump(model: Any) -> Any:
    return model.model_dump(mode="json", exclude_none=True)


def _dump_all(models: Iterable[Any]) -> list[Any]:
    return [_dump(m) for m in models]


def _finite(value: Any) -> Any:
    """`value` with NaN and infinities replaced by None, inside dicts, lists and tuples."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _wire_json(value: Any) -> bytes:
    """The JSON prime-runs sends (compact, UTF-8): what the request-size limit counts."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def _json_column(value: Any) -> str:
    return json.dumps(_finite(value), allow_nan=False)
