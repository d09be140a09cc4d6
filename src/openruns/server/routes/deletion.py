"""Deleting a run (`DELETE /runs/{id}`) and what the stores hold (`GET /usage`): issue 22."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from ..deletion import delete_run
from ..errors import forbidden
from ..handlers import JSON
from ..store import usage
from .deps import Caller, State, writable_run

__all__ = ["router"]

router = APIRouter(tags=["runs"])


@router.delete(
    "/runs/{run_id}",
    responses={200: {"description": "the run's tombstone: when, by whom, what was removed"}},
)
async def delete_run_route(run_id: str, state: State, caller: Caller) -> JSON:
    """Delete the run with everything it owns: metric rows, episodes and their segments,
    annotations, console lines, receipts, search entries, the Prime and W&B wires' rows and
    files, and every blob. Answers when all of it is removed. Needs the team's API key (or a
    dashboard session), not a run token; another team's run is a 404. The id stays taken: a
    new run with it is a 409 `run_deleted` unless created with `reuse_deleted_id: true`."""
    if not caller.can_create:
        raise forbidden("a run token cannot delete runs; use the team's API key")
    run = await writable_run(state, caller, run_id)
    tomb = await delete_run(state, run, caller.bucket)
    return JSON(_public_tomb(tomb))


@router.get("/usage")
async def get_usage(
    state: State,
    caller: Caller,
    project: Annotated[str | None, Query(max_length=256)] = None,
    run: Annotated[str | None, Query(max_length=256, description="one run's id")] = None,
) -> JSON:
    """What the caller's team stores, per team, project and run: blobs (count and bytes),
    rows by kind, and an estimate of the rows' bytes (store/usage.py says how)."""
    only_run = caller.run_id if caller.run_id is not None else run
    found = await state.store.read(usage.usage, caller.team_id, project, only_run)
    return JSON(found)


def _public_tomb(tomb: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": tomb["run_id"],
        "team_id": tomb["team_id"],
        "project": tomb["project"],
        "name": tomb["name"],
        "deleted_at": tomb["deleted_at"],
        "purged": tomb.get("purged", tomb.get("purged_at") is not None),
        "removed": tomb["removed"],
    }
