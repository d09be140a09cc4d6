"""
Reading back what the legacy sample tables kept (native API, native auth): a run's eval sample
rows as NDJSON, and its training-samples Parquet objects, listed by step and downloaded as PUT.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response, StreamingResponse

from ..errors import not_found
from ..handlers import JSON
from ..routes.deps import Caller, State, readable_run
from ..routes.export import ExportReport, blob_lines, ndjson_to_the_end
from ..segment_reads import DamagedSegment
from ..state import ServerState
from ..store import prime as prime_sql
from ..store.metrics import MAX_STEP

__all__ = ["router"]

router = APIRouter(tags=["prime: sample tables"])


@router.get(
    "/runs/{run_id}/prime/eval-samples",
    responses={200: {"content": {"application/x-ndjson": {}}, "description": "the rows"}},
)
async def eval_samples(run_id: str, state: State, caller: Caller) -> StreamingResponse:
    """Every eval sample row pushed to the run, as sent, in the order they arrived."""
    run = await readable_run(state, caller, run_id)
    objects = await state.store.read(prime_sql.list_objects, run["seq"], "eval_samples")
    report = ExportReport(run["id"])
    body = ndjson_to_the_end(b"", _rows(state, objects, report), report)
    return StreamingResponse(body, media_type="application/x-ndjson")


async def _rows(
    state: ServerState, objects: list[dict[str, Any]], report: ExportReport
) -> AsyncIterator[bytes]:
    """The rows of each object; one that cannot be read is skipped and reported (as exports
    do: routes/export.py), never cut mid-row."""
    for obj in objects:
        async for piece in blob_lines(state, obj["blob_key"], obj["rows"], report):
            yield piece


@router.get("/runs/{run_id}/prime/train-samples")
async def train_samples(
    run_id: str,
    state: State,
    caller: Caller,
    step: Annotated[int | None, Query(ge=0, le=MAX_STEP)] = None,
) -> JSON:
    """The run's training-samples Parquet objects (of one step): several per step are one
    table, as the platform's viewer reads them (keyed by step and sample_id)."""
    run = await readable_run(state, caller, run_id)
    objects = await state.store.read(prime_sql.list_objects, run["seq"], "train_samples", step)
    items = [
        {k: o[k] for k in ("id", "step", "bytes", "rows", "created_at")}
        | {"url": f"/api/v1/runs/{run['id']}/prime/train-samples/{o['id']}"}
        for o in objects
    ]
    return JSON({"items": items})


@router.get(
    "/runs/{run_id}/prime/train-samples/{object_id}",
    responses={
        200: {"content": {"application/vnd.apache.parquet": {}}},
        410: {"description": "the stored object is damaged (named)"},
    },
)
async def train_samples_object(
    run_id: str, object_id: int, state: State, caller: Caller
) -> Response:
    """One Parquet object, byte for byte."""
    run = await readable_run(state, caller, run_id)
    objects = await state.store.read(prime_sql.list_objects, run["seq"], "train_samples")
    found = [o for o in objects if o["id"] == object_id]
    if not found:
        raise not_found(f"run {run_id!r} has no training-samples object {object_id}")
    key = found[0]["blob_key"]
    try:
        data = await run_in_threadpool(state.blobs.get, key)
    except FileNotFoundError as exc:
        raise DamagedSegment(key, "the blob is missing") from exc
    if len(data) != found[0]["bytes"]:
        raise DamagedSegment(key, f"{len(data)} bytes where {found[0]['bytes']} were written")
    return Response(data, media_type="application/vnd.apache.parquet")
