"""
The run links prime-runs prints: `<PRIME_FRONTEND_URL>/dashboard/training/<id>` for a training
run (an evaluation's link is the `viewer_url` the server answers). With `PRIME_FRONTEND_URL`
set to this server they open the run's page here (issue 24).
"""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter
from fastapi.responses import RedirectResponse

__all__ = ["router"]

router = APIRouter(include_in_schema=False)


@router.get("/dashboard/training/{run_id}")
@router.get("/dashboard/evaluations/{run_id}")
async def platform_run_link(run_id: str) -> RedirectResponse:
    return RedirectResponse(f"/runs/{quote(run_id, safe='')}", status_code=308)
