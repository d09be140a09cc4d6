"""
The run links prime-runs prints: `run.url` is `<PRIME_FRONTEND_URL>/dashboard/training/<id>` for
a training run and `.../dashboard/evaluations/<id>` for an attached eval (reference b.2, b.3).
With `PRIME_FRONTEND_URL` pointing here, each redirects to the run's page (issue 20).
"""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter
from starlette.responses import RedirectResponse

from ...identity import invalid_run_id
from ..errors import not_found

__all__ = ["router"]

router = APIRouter(include_in_schema=False)


@router.get("/dashboard/training/{run_id}")
@router.get("/dashboard/evaluations/{run_id}")
async def prime_run_page(run_id: str) -> RedirectResponse:
    if invalid_run_id(run_id) is not None:
        raise not_found(f"no run {run_id[:80]!r}")
    # Relative to this server, the id quoted whole: never a way to another site.
    return RedirectResponse(f"/runs/{quote(run_id, safe='')}", status_code=307)
