"""
The dashboard, served by the server at the root (DESIGN.md section 7): HTML shells, our own
small scripts and styles, Plotly's vendored partial bundle, and the
highlighted config. Everything else it shows comes from the JSON API under /api/v1.

    app.include_router(openruns.server.web.router)
"""

from __future__ import annotations

from fastapi import APIRouter

from . import assets, highlight, pages

__all__ = ["router"]

router = APIRouter(include_in_schema=False)
router.include_router(assets.router)
router.include_router(highlight.router)
router.include_router(pages.router)
