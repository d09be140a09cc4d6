"""Annotations: upload NDJSON facts about episodes; read them, per run or per episode."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from ..annotations import public, upload_annotations
from ..handlers import JSON
from ..models import AnnotationsPage, AnnotationsReceipt
from ..store.annotations import page as annotations_page
from .deps import Caller, State, decode_cursor, encode_cursor, readable_run, writable_run
from .metrics import NDJSON_BODY, UploadKey

__all__ = ["router"]

router = APIRouter(tags=["annotations"])


@router.post(
    "/runs/{run_id}/annotations",
    response_model=AnnotationsReceipt,
    openapi_extra=NDJSON_BODY,
    responses={409: {"description": "the run finished more than the grace period ago"}},
)
async def post_annotations(
    run_id: str, request: Request, state: State, caller: Caller, idempotency_key: UploadKey = None
) -> JSON:
    """
    NDJSON annotations, one per line: `{"episode_id", "trace_id"?, "step"? (trained at),
    "info"?, "branches"?, "producer"?, "ts"?}`, compressed as for metrics. Stored append-only;
    an episode read folds them in. The episode may arrive before or after its annotations.
    """
    run = await writable_run(state, caller, run_id)
    return JSON(await upload_annotations(state, request, run, idempotency_key))


@router.get("/runs/{run_id}/annotations", response_model=AnnotationsPage)
async def list_annotations(
    run_id: str,
    state: State,
    caller: Caller,
    episode_id: Annotated[str | None, Query(max_length=256)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
) -> JSON:
    """Annotations as sent (plus `producer` and `ts`), in the order they were stored."""
    run = await readable_run(state, caller, run_id)
    after = decode_cursor(cursor, ((int,),))
    rows = await state.store.read(
        annotations_page, run["seq"], after[0] if after else 0, limit + 1, episode_id
    )
    next_cursor = encode_cursor([rows[limit - 1]["seq"]]) if len(rows) > limit else None
    return JSON({"items": [public(r) for r in rows[:limit]], "next_cursor": next_cursor})
