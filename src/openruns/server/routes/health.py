"""GET /api/v1/health: liveness and what the server accepts (no auth)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from ..._version import __version__
from ..body import ENCODINGS
from ..handlers import JSON
from ..models import Health
from ..state import server_state

__all__ = ["router"]

router = APIRouter(tags=["server"])


@router.get("/health", response_model=Health)
async def health(request: Request) -> JSON:
    """Liveness, the body encodings accepted, and the heartbeat timeout (owners heartbeat at a
    third of it, at most every 15 s)."""
    state = server_state(request)
    return JSON(
        {
            "status": "ok",
            "version": __version__,
            "encodings": list(ENCODINGS),
            "heartbeat_timeout": state.settings.heartbeat_timeout,
        }
    )
