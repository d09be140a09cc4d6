"""Console output: upload NDJSON lines; read them in pages, by stream and source, or the tail."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from ..handlers import JSON
from ..logs import STREAM_PATTERN, upload_logs
from ..models import LogsPage, LogsReceipt
from ..store import logs as log_sql
from .deps import Caller, State, readable_run, writable_run
from .metrics import NDJSON_BODY, UploadKey

__all__ = ["router"]

router = APIRouter(tags=["logs"])

Offset = Annotated[int | None, Query(ge=-1, le=2**63 - 1)]


@router.post(
    "/runs/{run_id}/logs",
    response_model=LogsReceipt,
    openapi_extra=NDJSON_BODY,
    responses={409: {"description": "the run finished more than the grace period ago"}},
)
async def post_logs(
    run_id: str, request: Request, state: State, caller: Caller, idempotency_key: UploadKey = None
) -> JSON:
    """
    NDJSON lines a run's processes printed: `{"ts", "stream" (stdout | stderr | traceback |
    ...), "source"? (default "main"), "line"}`, compressed as for metrics. Appended in arrival
    order; beyond the server's `max_log_mib` per run the middle is dropped and counted.
    """
    run = await writable_run(state, caller, run_id)
    return JSON(await upload_logs(state, request, run, idempotency_key))


@router.get("/runs/{run_id}/logs", response_model=LogsPage)
async def read_logs(
    run_id: str,
    state: State,
    caller: Caller,
    stream: Annotated[str | None, Query(pattern=STREAM_PATTERN)] = None,
    source: Annotated[str | None, Query(min_length=1, max_length=128)] = None,
    after: Annotated[Offset, Query(description="lines after this offset (live reads)")] = None,
    before: Annotated[Offset, Query(description="lines before this offset")] = None,
    tail: Annotated[
        bool, Query(description="the newest `limit` lines instead of the oldest")
    ] = False,
    limit: Annotated[int, Query(ge=1, le=5000)] = 1000,
) -> JSON:
    """
    Lines in the order they arrived (each with its `offset`, the keyset of pages): the first
    `limit` after `after`, or with `tail=true` the last `limit` before `before`. `totals` says
    how many lines the run printed and how many were dropped (`gap_offset`: where).
    """
    run = await readable_run(state, caller, run_id)
    items = await state.store.read(
        log_sql.page,
        run["seq"],
        stream=stream,
        source=source,
        after=after,
        before=before,
        limit=limit,
        newest=tail,
    )
    return JSON({"items": items, "totals": await state.store.read(log_sql.totals, run["seq"])})
