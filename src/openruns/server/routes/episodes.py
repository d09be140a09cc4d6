"""Episodes and traces: upload NDJSON; read steps, index pages, one whole record."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Header, Query, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from ..annotations import fold
from ..errors import not_found
from ..handlers import JSON
from ..ingest import upload_episodes
from ..models import EpisodesPage, EpisodesReceipt, StepRow
from ..segment_reads import read_record as read_stored_record
from ..store import episodes as episode_sql
from ..store.annotations import of_episode as annotations_of_episode
from ..store.metrics import MAX_STEP
from .deps import Caller, State, decode_cursor, encode_cursor, readable_run, writable_run
from .metrics import NDJSON_BODY, UploadKey

__all__ = ["router"]

router = APIRouter(tags=["episodes"])

Stream = Literal["episodes", "traces"]
By = Annotated[
    Literal["dispatched", "trained"],
    Query(description="a step is the one episodes were dispatched at, or trained at"),
]
Kind = Annotated[Literal["train", "eval"] | None, Query(description="default: both")]
Subset = Annotated[str | None, Query(max_length=32, description="a cohort: all, effective")]


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
    step_max: Annotated[
        int | None, Query(ge=-(2**63), le=MAX_STEP, description="only steps <= this")
    ] = None,
    after: Annotated[
        int | None,
        Query(ge=-(2**63), le=MAX_STEP, description="the next page: steps past this one"),
    ] = None,
    order: Annotated[
        Literal["asc", "desc"], Query(description="step order: desc for the newest first")
    ] = "asc",
    limit: Annotated[int, Query(ge=1, le=episode_sql.MAX_STEPS_PAGE)] = (
        episode_sql.MAX_STEPS_PAGE
    ),
    by: By = "dispatched",
    kind: Kind = None,
    subset: Subset = None,
    env: Annotated[str | None, Query(max_length=1024)] = None,
) -> JSON:
    """Per step (dispatched at, or trained at): how many records, their mean reward, and how
    many of them are off-policy (trained at another step than dispatched at).

    A page of at most `limit` steps in `order`; a page of `limit` rows may have a next one,
    asked for `after` its last step. The records of no step are a row of step null after
    every step, when neither bound is given."""
    run = await readable_run(state, caller, run_id)
    return JSON(
        await state.store.read(
            episode_sql.steps,
            run["seq"],
            stream,
            step_min,
            by=by,
            step_max=step_max,
            after=after,
            limit=limit,
            descending=order == "desc",
            kind=kind,
            subset=subset,
            env=env,
        )
    )


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
    kind: Kind = None,
    subset: Subset = None,
    by: By = "dispatched",
    id: Annotated[
        str | None, Query(max_length=1024, description="only the index row of this record")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(max_length=400)] = None,
) -> JSON:
    """Index rows, sorted (NULLs last; ties in arrival order, and `-reward` is `reward`
    reversed, so its ties come newest first) and filtered, one page at a time. `step` with
    `by=trained`: the episodes an annotation says were trained at that step. `id`: one
    record's row (the step it was indexed at, its reward as the index reads it)."""
    run = await readable_run(state, caller, run_id)
    after = decode_cursor(cursor, ((int, float, type(None)), (int,)))
    items, last = await state.store.read(
        episode_sql.list_episodes,
        run["seq"],
        stream=stream,
        step=step,
        by=by,
        env=env,
        ok=ok,
        kind=kind,
        subset=subset,
        episode_id=id,
        sort=sort,
        limit=limit,
        after=(after[0], after[1]) if after else None,
    )
    next_cursor = encode_cursor(list(last)) if last else None
    return JSON({"items": items, "next_cursor": next_cursor})


@router.get(
    "/runs/{run_id}/episodes/{episode_id:path}",
    responses={
        200: {"content": {"application/json": {}}, "description": "the stored record"},
        410: {"description": "the segment holding the record is damaged (named)"},
    },
)
async def get_episode(
    run_id: str,
    episode_id: str,
    state: State,
    caller: Caller,
    annotations: Annotated[
        bool, Query(description="false: the record exactly as uploaded, without annotations")
    ] = True,
) -> Response:
    """One whole record: the JSON line that was uploaded, with the annotations about it folded
    in (`info` merged, `annotated_branches`, and an `annotations` summary with its
    `trained_step`), unless `annotations=false`. The stored bytes are checked against the
    index before anything is decoded: a record is answered as stored, or 410 naming its
    segment (docs/security.md)."""
    run = await readable_run(state, caller, run_id)
    where = await state.store.read(episode_sql.locate, run["seq"], episode_id)
    if where is None:
        raise not_found(f"run {run_id!r} has no episode or trace {episode_id!r}")
    record = await run_in_threadpool(read_stored_record, state.blobs, where)
    if annotations:
        rows = await state.store.read(annotations_of_episode, run["seq"], episode_id)
        if rows:
            record = await run_in_threadpool(fold, record, rows)
    return Response(record, media_type="application/json")
