"""
The ASGI application.

    app = create_app(ServerSettings(data_dir=Path("data")))

`create_app` assembles small parts: the lifespan (open the store, run the crash sweeper, the
search indexer, the purge of deleted runs, the alert evaluator and deliverer (alerts/), the
retention pass (retention/), close),
the middlewares (from the outside in: the access log, trusted proxies, security headers, the
body-size cap, the Host check and cross-site writes with auth off (hosts.py), the refusal of NaN
in JSON bodies), the error handlers, the API routers under /api/v1, and the dashboard router
(web/) at the root. Pass an already-open `state` to keep startup errors out of the lifespan
(serve.py does, so they can be reported in one line).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from fastapi import FastAPI

from .._version import __version__
from . import api_docs, deletion, search_indexer
from .access_log import AccessLog
from .alerts import delivery, evaluator
from .config import ServerSettings
from .errors import ApiError
from .handlers import document_errors, install_handlers
from .hosts import RequestGate
from .limits import BodyLimit
from .prime import include_prime
from .retention.reduce import retain_forever
from .routes import ROUTERS
from .security import install_security
from .state import ServerState
from .strict_json import RejectNonFinite
from .wandb import include_wandb
from .web import router as web_router
from .web.pages import not_found_page

__all__ = ["create_app"]

logger = logging.getLogger("openruns.server")

API_PREFIX = "/api/v1"
# The sweep interval: often enough that a crash shows within ~1/4 of the timeout, at most 30 s.
_MAX_SWEEP_SECONDS = 30.0


def create_app(settings: ServerSettings, state: ServerState | None = None) -> FastAPI:
    if state is None:
        settings.auth_enabled()  # refuse an unsafe bind before anything else

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        current = state if state is not None else ServerState.open(settings)
        app.state.server = current
        tasks = [
            asyncio.create_task(_sweep_forever(current)),
            asyncio.create_task(search_indexer.follow(current)),
            asyncio.create_task(evaluator.follow(current)),
            asyncio.create_task(delivery.follow(current)),
            asyncio.create_task(deletion.purge_forever(current)),  # interrupted deletions
            asyncio.create_task(
                retain_forever(
                    current.store,
                    current.blobs,
                    current.settings.retention_rules(),
                    current.settings.retention_interval,
                )
            ),
        ]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            current.close()

    app = FastAPI(
        title="openruns",
        version=__version__,
        description="Run tracker for LLM evaluation and RL training: the native API (v1).",
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url=None,  # api_docs.py: the same Swagger UI, without inline script
        redoc_url=None,
        # A path with a stray "/" is a 404 naming it, not a redirect no operation documents.
        redirect_slashes=False,
        lifespan=lifespan,
    )
    install_handlers(app, not_found_page)
    app.add_middleware(RejectNonFinite)  # inside BodyLimit: it reads capped bodies
    # Inside BodyLimit too: a refusal before the body is read closes the connection.
    app.add_middleware(RequestGate, settings=settings, auth=settings.auth_enabled())
    app.add_middleware(
        BodyLimit,
        json_limit=settings.max_json_bytes,
        ingest_limit=settings.max_body_bytes,
        min_rate=settings.body_min_rate,
        grace=settings.body_grace,
        idle=settings.body_idle_timeout,
    )
    install_security(app, settings)  # every answer gets the headers, refusals too
    app.add_middleware(AccessLog, sample=settings.access_log)  # outermost: sees every answer
    for router in ROUTERS:
        app.include_router(router, prefix=API_PREFIX)
    include_prime(app)  # the routes prime-runs calls (server/prime/)
    include_wandb(app)  # the routes the wandb SDK calls (server/wandb/)
    app.include_router(api_docs.router)
    app.include_router(web_router)
    document_errors(app)
    return app


async def _sweep_forever(state: ServerState) -> None:
    """Crash silent runs, forever. Every replica runs one: the sweep locks its candidate rows
    with SKIP LOCKED and crashes each by a compare-and-set, so two sweeps never crash a run
    twice (store/runs.crash_stale)."""
    interval = min(_MAX_SWEEP_SECONDS, max(0.05, state.settings.heartbeat_timeout / 4))
    while True:
        await asyncio.sleep(interval)
        try:
            crashed = await state.store.sweep()
        except ApiError as exc:  # the database is busy or unreachable: the next tick retries
            logger.warning("openruns: crash sweep skipped: %s", exc.message)
            continue
        except Exception:
            logger.warning("openruns: the crash sweep failed; retrying", exc_info=True)
            continue
        if crashed:
            logger.info("openruns: marked %d silent run(s) crashed", crashed)
