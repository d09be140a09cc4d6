"""The API routers, mounted under /api/v1 by app.py."""

from __future__ import annotations

from . import episodes, export, health, metrics, rollouts, runs

__all__ = ["ROUTERS"]

ROUTERS = (
    health.router,
    runs.router,
    metrics.router,
    episodes.router,
    export.router,
    rollouts.router,
)
