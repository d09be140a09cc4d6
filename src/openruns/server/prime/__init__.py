"""
The Prime wire: the routes the unmodified prime-runs SDK (0.1.4) and prime-traces (0.0.10)
call, mapped onto the native store, so code written for the Prime platform logs into openruns
with `PRIME_API_BASE_URL`, `PRIME_TRACES_URL` and `PRIME_API_KEY` pointing here.

    environments.py   POST /environmentshub/resolve, GET /environmentshub/{owner}/{name}/@latest
    evaluations.py    /evaluations/...: an eval run
    rft.py            /rft/...: an external training run, its metrics, samples and closing
    objects.py        the presigned PUT (this server's stand-in for S3 presigned URLs)
    traces.py         POST /traces: Prime Traces batches into the runs' episodes
    samples.py        the legacy sample tables: eval rows and training Parquet, kept as sent
    exports.py        reading those back (native API)
    links.py          /dashboard/training/{id}, /dashboard/evaluations/{id}: prime-runs'
                      `run.url`, redirected to the run's page
    deps.py           caller (Bearer or x-api-key), teams, runs, document conversions

A Prime eval is an openruns run of kind eval, an external training run one of kind train:
ordinary runs in the native API, the read client and the dashboard. The platform routes are
served under /api/v1 and again under /api/internal (the root hosted runs are handed), the
traces upload, the presigned PUT and the exports under /api/v1 only.
"""

from __future__ import annotations

from fastapi import FastAPI

from . import environments, evaluations, exports, links, objects, rft, traces

__all__ = ["include_prime"]


def include_prime(app: FastAPI) -> None:
    for router in (environments.router, evaluations.router, rft.router):
        app.include_router(router, prefix="/api/v1")
        app.include_router(router, prefix="/api/internal", include_in_schema=False)
    for router in (traces.router, objects.router, exports.router):
        app.include_router(router, prefix="/api/v1")
    app.include_router(links.router)
