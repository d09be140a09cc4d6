"""The dashboard, served at the root of the server (placeholder while it is written)."""

from __future__ import annotations

from fastapi import APIRouter

__all__ = ["router"]

router = APIRouter(include_in_schema=False)
