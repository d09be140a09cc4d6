"""
The wandb SDK exports its own OpenTelemetry metrics and logs (upload timings, the SDK's
errors) to `{WANDB_BASE_URL}/sdk/otel/v1/{metrics,logs}`. They are W&B's diagnostics of its
client, not the run's data: accepted (204) and dropped, so the SDK neither retries them nor
reports a failure. The body is not read past the cap every route has (limits.BodyLimit).
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

__all__ = ["router"]

router = APIRouter(include_in_schema=False)


@router.post("/sdk/otel/v1/{signal}")
async def otel_export(signal: str) -> Response:
    return Response(status_code=204)
