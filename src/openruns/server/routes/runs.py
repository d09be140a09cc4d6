"""Runs: create (idempotent), list, read, patch, finish (compare-and-set), heartbeat."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Annotated, Literal

from fastapi import APIRouter, Header, Query

from ...identity import new_run_id
from ..auth import acting_team, run_token
from ..errors import bad_request, conflict, forbidden
from ..handlers import JSON
from ..models import RunCreate, RunCreated, RunFinish, RunList, RunOut, RunPatch, Status
from ..queries.language import (
    COLUMNS,
    MAX_FILTER_CHARS,
    Field,
    FilterError,
    parse_field,
    parse_filter,
    parse_sort,
)
from ..store.run_query import RunQuery
from ..store.runs import check_run_id, request_stop
from ..store.runs import heartbeat as record_heartbeat
from .deps import (
    Caller,
    State,
    decode_cursor,
    encode_cursor,
    public_run,
    readable_run,
    writable_run,
)

__all__ = ["router"]

router = APIRouter(tags=["runs"])

MAX_COLUMNS = 50  # fields per run in one listing's `values`

IdempotencyKey = Annotated[
    str | None,
    Header(max_length=256, description="a replay with the same key returns the same run"),
]


@router.post(
    "/runs",
    status_code=201,
    response_model=RunCreated,
    responses={200: {"model": RunCreated, "description": "the run already existed"}},
)
async def create_run(
    body: RunCreate, state: State, caller: Caller, idempotency_key: IdempotencyKey = None
) -> JSON:
    """Create a run, or return the one an earlier call with this `id` / Idempotency-Key made.
    Ids are per team: another team's run with the same id is not this one, and its existence
    is not revealed. A client-chosen id is 1 to 64 letters, digits, `.`, `_` or `-`, starting
    with a letter or a digit (400 otherwise)."""
    if body.id is not None:
        check_run_id(body.id)
    if not caller.can_create:
        raise forbidden("a run token cannot create runs; use an API key")
    team_id = acting_team(caller, body.team_id)
    fields = body.model_dump(exclude={"team_id", "config"})
    fields["id"] = body.id or new_run_id()
    fields["config"] = body.config.model_dump(exclude_none=True) if body.config else None
    run, created = await state.store.create_run(
        team_id, fields, idempotency_key, ids_per_team=state.auth_enabled
    )
    token = run_token(state.store.secret, run["team_id"], run["id"])
    out = {**public_run(state, run), "token": token}
    return JSON(out, 201 if created else 200)


@router.get("/runs", response_model=RunList)
async def list_runs(
    state: State,
    caller: Caller,
    kind: Literal["eval", "train"] | None = None,
    status: Status | None = None,
    name: Annotated[str | None, Query(max_length=1024, description="substring")] = None,
    tag: Annotated[str | None, Query(max_length=256)] = None,
    group: Annotated[str | None, Query(max_length=256)] = None,
    project: Annotated[str | None, Query(max_length=256)] = None,
    filter: Annotated[
        str | None,
        Query(
            max_length=MAX_FILTER_CHARS,
            description="an expression over config.<path>, summary.<path>, metric:<key> and "
            "the run's columns: `config.lr < 1e-5 and summary.reward > 0.5` (docs/server.md)",
        ),
    ] = None,
    sort: Annotated[
        str | None,
        Query(max_length=512, description="a field, `-` first for descending: `-metric:reward`"),
    ] = None,
    columns: Annotated[
        str | None,
        Query(
            max_length=4096,
            description="comma-separated fields answered per run in `values` "
            "(`config.lr,summary.reward,metric:loss`)",
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=1000)] = None,
) -> JSON:
    """Runs newest first (or in the order of `sort`), one page at a time (pass `next_cursor`
    back as `cursor`, with the same filter and sort)."""
    query = _run_query(filter, sort, columns)
    if query is None:
        after = decode_cursor(cursor, ((int,),))
    else:
        shape = ((int, float, str, type(None)), (int,)) if query.sort else ((int,),)
        decoded = decode_cursor(cursor, shape)
        if decoded is not None and query.sort and not _fits_sort(decoded[0], query.sort[0]):
            raise bad_request("invalid_cursor", "the cursor is of another sort than this one")
        if decoded is not None:
            after = decoded if query.sort else [None, decoded[0]]
            query = replace(query, after=(after[0], after[1]))
        after = None
    page = await state.store.list_runs(
        team_id=caller.team_id,
        only_run=caller.run_id,
        kind=kind,
        status=status,
        name=name,
        tag=tag,
        group=group,
        project=project,
        limit=limit + 1,
        before_seq=after[0] if after else None,
        query=query,
    )
    next_cursor = None
    if len(page) > limit:
        last = page[limit - 1]
        sorted_by_value = query is not None and query.sort is not None
        next_cursor = encode_cursor(
            [last["sort_value"], last["seq"]] if sorted_by_value else [last["seq"]]
        )
    items = []
    for run in page[:limit]:
        run.pop("sort_value", None)
        if query is None or not query.columns:
            run.pop("values", None)
        items.append(public_run(state, run))
    return JSON({"items": items, "next_cursor": next_cursor})


def _fits_sort(value: object, field: Field) -> bool:
    """Whether a cursor's sort value has the type the sort compares (numbers or text)."""
    if value is None:
        return True
    numeric = field.source != "column" or COLUMNS[field.path[0]] == "time"
    return isinstance(value, (int, float)) if numeric else isinstance(value, str)


def _run_query(filter: str | None, sort: str | None, columns: str | None) -> RunQuery | None:
    """The filter, sort and columns of a listing, parsed; 400 naming what does not parse."""
    if not (filter or sort or columns):
        return None
    try:
        where = parse_filter(filter) if filter else None
    except FilterError as exc:
        raise bad_request("invalid_filter", f"filter: {exc}") from exc
    try:
        order = parse_sort(sort) if sort else None
    except FilterError as exc:
        raise bad_request("invalid_sort", f"sort: {exc}") from exc
    names = [c for c in (columns or "").split(",") if c.strip()]
    if len(names) > MAX_COLUMNS:
        raise bad_request("invalid_columns", f"columns: at most {MAX_COLUMNS} fields")
    try:
        fields = tuple(parse_field(c) for c in names)
    except FilterError as exc:
        raise bad_request("invalid_columns", f"columns: {exc}") from exc
    return RunQuery(where=where, sort=order, columns=fields)


@router.get("/runs/{run_id}", response_model=RunOut)
async def get_run(run_id: str, state: State, caller: Caller) -> JSON:
    return JSON(public_run(state, await readable_run(state, caller, run_id)))


@router.patch("/runs/{run_id}", response_model=RunOut)
async def patch_run(run_id: str, body: RunPatch, state: State, caller: Caller) -> JSON:
    """Merge into the summary; replace tags, description, notes, group (null clears those
    three) and losses; `fill` sets each of its fields only where the run has none (a component
    naming its launcher's run, or reporting its fatal error while the run runs)."""
    run = await writable_run(state, caller, run_id)
    changes = {
        k: v
        for k, v in body.model_dump(include={"summary", "tags", "losses", "step_metrics"}).items()
        if v is not None
    }
    for field in ("description", "notes", "group"):
        if field in body.model_fields_set:
            changes[field] = getattr(body, field)
    if body.fill is not None:
        fill = body.fill.model_dump(exclude_none=True)
        if body.fill.config is not None:
            fill["config"] = body.fill.config.model_dump(exclude_none=True)
        if fill:
            changes["fill"] = fill
    return JSON(public_run(state, await state.store.patch_run(run, changes)))


@router.post(
    "/runs/{run_id}/finish",
    response_model=RunOut,
    responses={409: {"description": "the run already finished with another status"}},
)
async def finish_run(run_id: str, body: RunFinish, state: State, caller: Caller) -> JSON:
    """Close a running run. The same status again is a no-op (200); another one is 409. A
    failure without an `error` keeps the one a component reported (PATCH fill).
    `finished_at` and `last_heartbeat_at` (a run uploaded later) default to now."""
    run = await writable_run(state, caller, run_id)
    changes = {k: v for k, v in body.model_dump(include={"summary", "losses"}).items() if v}
    error = body.error
    if error is None and body.status != "completed" and run["status"] == "running":
        error = run["error"]
    times = body.model_dump(include={"finished_at", "last_heartbeat_at"}, exclude_none=True)
    run = await state.store.finish_run(run, body.status, error, changes, times)
    return JSON(public_run(state, run))


@router.post(
    "/runs/{run_id}/stop",
    response_model=RunOut,
    responses={409: {"description": "the run is not running"}},
)
async def stop_run(run_id: str, state: State, caller: Caller) -> JSON:
    """Ask the run's process to stop (the dashboard's Stop). The run stays running until its
    process ends it: a W&B SDK learns of it from the file stream and stops its script
    (issue 19); `stop_requested_at` says when it was asked."""
    run = await writable_run(state, caller, run_id)
    if not await state.store.write(request_stop, run["seq"], time.time()):
        raise conflict("run_finished", f"the run is already {run['status']}")
    return JSON(public_run(state, await state.store.get_run(run_id, run["team_id"]) or run))


@router.post("/runs/{run_id}/heartbeat")
async def heartbeat(run_id: str, state: State, caller: Caller) -> JSON:
    """The owner is alive; answers the run's status (a finished run stays finished)."""
    run = await writable_run(state, caller, run_id)
    return JSON({"status": await state.store.write(record_heartbeat, run["seq"], time.time())})
