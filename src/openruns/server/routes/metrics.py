"""Metrics: upload NDJSON rows; read keys and series (downsampled or full)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Header, Query, Request

from ..handlers import JSON
from ..ingest import upload_metrics
from ..models import MetricKey, MetricSeries, MetricsReceipt
from ..store.metrics import MAX_STEP, is_kind
from .deps import Caller, State, readable_run, writable_run

__all__ = ["NDJSON_BODY", "UploadKey", "router"]

router = APIRouter(tags=["metrics"])

NDJSON_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/x-ndjson": {"schema": {"type": "string", "format": "binary"}}},
    }
}
UploadKey = Annotated[
    str | None,
    Header(
        min_length=1,
        max_length=256,
        description="sha256:<hex of the uncompressed body>; a repeat answers the first receipt",
    ),
]


@router.post(
    "/runs/{run_id}/metrics",
    response_model=MetricsReceipt,
    openapi_extra=NDJSON_BODY,
    responses={409: {"description": "the run finished more than the grace period ago"}},
)
async def post_metrics(
    run_id: str, request: Request, state: State, caller: Caller, idempotency_key: UploadKey = None
) -> JSON:
    """
    NDJSON rows `{"step": int, "ts": float, "values": {"key": number}}`, with
    `Content-Encoding: zstd | gzip | identity`. Merged per (step, key): last write wins. A row
    with `"step": null` is keyed by its `ts` (required then), merged per (ts, key).
    """
    run = await writable_run(state, caller, run_id)
    return JSON(await upload_metrics(state, request, run, idempotency_key))


@router.get("/runs/{run_id}/metrics/keys", response_model=list[MetricKey])
async def metric_keys(run_id: str, state: State, caller: Caller) -> JSON:
    run = await readable_run(state, caller, run_id)
    return JSON(await state.store.metric_keys(run["seq"]))


@router.get("/runs/{run_id}/metrics", response_model=MetricSeries)
async def metric_series(
    run_id: str,
    state: State,
    caller: Caller,
    keys: Annotated[str | None, Query(max_length=100_000, description="comma-separated")] = None,
    step_min: Annotated[int, Query(ge=0, le=MAX_STEP)] = 0,
    step_max: Annotated[int, Query(ge=0, le=MAX_STEP)] = MAX_STEP,
    max_points: Annotated[int, Query(ge=0, le=100_000, description="0: every point")] = 1000,
    ts_min: Annotated[float | None, Query(description="time-keyed rows from (epoch s)")] = None,
    ts_max: Annotated[float | None, Query(description="time-keyed rows up to (epoch s)")] = None,
    kind: Annotated[
        Literal["train", "eval"] | None,
        Query(description="eval: the keys under `eval/`; train: the others; default both"),
    ] = None,
) -> JSON:
    """
    Series by key: `series` by step, and `time` for the rows logged without a step (by
    timestamp). With more points in range than `max_points`, a series is bucketed into at most
    `max_points` buckets (of steps, or of time), each giving its last point and the min and max
    of all its points, so spikes are never sampled away.
    """
    run = await readable_run(state, caller, run_id)
    names = [k for k in keys.split(",") if k] if keys is not None else None
    if kind is not None:
        if names is None:
            names = [name for name, _ in await state.store.metric_key_ids(run["seq"])]
        names = [n for n in names if is_kind(n, kind)]
    series, downsampled = await state.store.metric_series(
        run["seq"], names, step_min, step_max, max_points
    )
    timed, timed_downsampled = await state.store.metric_time_series(
        run["seq"], names, ts_min, ts_max, max_points
    )
    return JSON({"series": series, "downsampled": downsampled or timed_downsampled, "time": timed})
