"""
The run page's address as the W&B SDK prints it (`View run at {base}/{entity}/{project}/runs/
{id}`) opens the openruns run page: a redirect, so the link the SDK prints works.
"""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter
from starlette.responses import RedirectResponse

__all__ = ["router"]

router = APIRouter(include_in_schema=False)


@router.get("/{entity}/{project}/runs/{run_id}")
async def wandb_run_page(entity: str, project: str, run_id: str) -> RedirectResponse:
    return RedirectResponse(f"/runs/{quote(run_id, safe='')}", status_code=307)
