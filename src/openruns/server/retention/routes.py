"""`GET /runs/{id}/retention`: what retention kept and dropped of a run (issue 22)."""

from __future__ import annotations

from fastapi import APIRouter

from ..handlers import JSON
from ..routes.deps import Caller, State, readable_run
from ..store import retention

__all__ = ["router"]

router = APIRouter(tags=["runs"])


@router.get(
    "/runs/{run_id}/retention",
    responses={200: {"description": "the run's retention record, or reduced: false"}},
)
async def get_retention(run_id: str, state: State, caller: Caller) -> JSON:
    """What retention did to the run: the rule applied (team, project, after_days,
    keep_per_step), when the last pass finished (`reduced_at`, null while one is under way),
    the episodes and bytes kept now, and the episodes, bytes and segments dropped or rewritten
    over all passes. `{"reduced": false}` when no pass has reduced it. Read like the run's other
    reads (its token, the team's key, a session); another team's run is a 404."""
    run = await readable_run(state, caller, run_id)
    found = await state.store.read(retention.record, run["seq"])
    if found is None:
        return JSON({"id": run_id, "reduced": False})
    return JSON({"id": run_id, "reduced": found["reduced_at"] is not None, **found})
