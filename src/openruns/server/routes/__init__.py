"""The API routers, mounted under /api/v1 by app.py."""

from __future__ import annotations

from . import episodes, export, health, metrics, runs
from .annotations import router as annotations_router  # `from . import` would find the

# `annotations` __future__ feature of this package instead of the submodule

__all__ = ["ROUTERS"]

ROUTERS = (
    health.router,
    runs.router,
    metrics.router,
    episodes.router,
    annotations_router,
    export.router,
)
