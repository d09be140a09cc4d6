"""The API routers, mounted under /api/v1 by app.py."""

from __future__ import annotations

from ..alerts.routes import router as alerts_router
from ..retention.routes import router as retention_router
from . import (
    deletion,
    episodes,
    export,
    health,
    logs,
    metrics,
    rollouts,
    runs,
    search_runs,
    session,
)

# Not `from . import annotations`: that name is the __future__ feature imported above.
from .annotations import router as annotations_router

__all__ = ["ROUTERS"]

ROUTERS = (
    health.router,
    session.router,
    runs.router,
    metrics.router,
    episodes.router,
    annotations_router,
    export.router,
    rollouts.router,
    search_runs.router,
    logs.router,
    alerts_router,
    deletion.router,
    retention_router,
)
