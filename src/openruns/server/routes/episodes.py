"""Episodes and traces: upload NDJSON; read steps, index pages, one whole record."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Header, Query, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from ..errors import not_found
from ..handlers import JSON
from ..ingest import upload_episodes
from ..models import EpisodesPage, EpisodesReceipt, StepRow
from ..segments import read_record
from ..store.metrics import MAX_STEP
from .deps import Caller, State, decode_cursor, encode_cursor, readable_run, writable_run
from .metrics import NDJSON_BODY, UploadKey

__all__ = ["router"]

router = APIRouter(tags=["episodes"])

Stream = Literal["episodes", "traces"]


@router.post(
    "/runs/{run_id}/episodes",
    response_model=EpisodesReceipt,
    openapi_extra=NDJSON_BODY,
    responses={409: {"description": "the run finished more than the grace period ago"}},
)
async def post_episodes(
    run_id: str,
    request: Request,
    state: State,
    caller: Caller,
    idempotency_key: UploadKey = None,
    x_openruns_stream: Annotated[Stream, Header()] = "episodes",
) -> JSON:
    """
    Episodes (objects with a `traces` list) or bare traces (`X-Openruns-Stream: traces`), stored
    as one immutable segment plus an index row per record. Either NDJSON, one JSON object per
    line, compressed as for metrics (the server parses, indexes and frames it), or, with
    `Content-Type: application/vnd.openruns.batch+zstd`, the SDK's batch: a header frame with
    one index row per record, then zstd frames stored as they are (see openruns.rundir).
    """
    run = await writable_run(state, caller, run_id)
    return JSON(await upload_episodes(state, request, run, idempotency_key, x_openruns_stream))


@router.get("/runs/{run_id}/steps", response_model=list[StepRow])
async def steps(
    run_id: str,
    state: State,
    caller: Caller,
    stream: Stream = "episodes",
    step_min: Annotated[
        int | None,
        Query(ge=-(2**63), le=MAX_STEP, description="only steps >= this (live polling)"),
    ] = None,
) -> JSON:
    """Per step: how many records, and their mean reward."""
    run = await readable_run(state, caller, run_id)
    return JSON(await state.store.steps(run["seq"], stream, step_min))


@router.get("/runs/{run_id}/episodes", response_model=EpisodesPage)
async def list_episodes(
    run_id: str,
    state: State,
    caller: Caller,
    step: Annotated[int | None, Query(ge=-(2**63), le=MAX_STEP)] = None,
    stream: Stream = "episodes",
    sort: Literal["step", "reward", "-reward"] = "step",
    env: Annotated[str | None, Query(max_length=1024)] = None,
    ok: bool | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(max_length=400)] = None,
) -> JSON:
    """Index rows, sorted (NULLs last) and filtered, one page at a time."""
    run = await readable_run(state, caller, run_id)
    after = decode_cursor(cursor, ((int, float, type(None)), (int,)))
    items, last = await state.store.list_episodes(
        run["seq"],
        stream=stream,
        step=step,
        env=env,
        ok=ok,
        sort=sort,
        limit=limit,
        after=(after[0], after[1]) if after else None,
    )
    next_cursor = encode_cursor(list(last)) if last else None
    return JSON({"items": items, "next_cursor": next_cursor})


@router.get(
    "/runs/{run_id}/episodes/{episode_id:path}",
    responses={200: {"content": {"application/json": {}}, "description": "the stored record"}},
)
async def get_episode(run_id: str, episode_id: str, state: State, caller: Caller) -> Response:
    """One whole record, exactly the JSON line that was uploaded."""
    run = await readable_run(state, caller, run_id)
    where = await state.store.locate_episode(run["seq"], episode_id)
    if where is None:
        raise not_found(f"run {run_id!r} has no episode or trace {episode_id!r}")
    frame = await run_in_threadpool(
        state.blobs.get_range, where["blob_key"], where["frame_offset"], where["frame_length"]
    )
    record = await run_in_threadpool(read_record, frame, where["offset"], where["length"])
    return Response(record, media_type="application/json")
