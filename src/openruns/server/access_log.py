"""
The access log: one line per request on the `openruns.server.access` logger (INFO).

    method=POST path=/api/v1/runs/r-1/metrics status=200 ms=4.2 bytes=61

The path is the one requested, still percent-encoded (so a line is one line whatever the path
holds) and without its query string, which may carry a presigned URL's signature or a token.
`bytes` counts the response body. The same fields are on the record (`record.access`, a dict)
for a structured handler. `--access-log` samples: 1 logs every request, a fraction logs that
share of successful answers and every error (status 400 and up), 0 none. `openruns server`
prints the lines on stderr; an embedding process (serve_in_thread) routes the logger as it
likes.
"""

from __future__ import annotations

import logging
import random
import time
from typing import Any
from urllib.parse import quote

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["ACCESS_LOGGER", "AccessLog", "log_to_stderr"]

ACCESS_LOGGER = "openruns.server.access"
logger = logging.getLogger(ACCESS_LOGGER)


class AccessLog:
    """ASGI middleware logging each HTTP request once its answer is sent (or has failed)."""

    def __init__(self, app: ASGIApp, sample: float):
        self.app = app
        self.sample = sample

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.sample <= 0:
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0  # no answer started: the client went away, or the app failed (500)
        sent = 0

        async def send_counted(message: Message) -> None:
            nonlocal status, sent
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body":
                sent += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, send_counted)
        except BaseException:
            status = status or 500
            raise
        finally:
            if status >= 400 or self.sample >= 1 or random.random() < self.sample:
                _log(scope, status, (time.perf_counter() - started) * 1000, sent)


def _log(scope: Scope, status: int, ms: float, sent: int) -> None:
    raw = scope.get("raw_path")
    path = raw.decode("latin-1") if raw else quote(scope.get("path", ""))
    path = path.partition("?")[0].encode("ascii", "backslashreplace").decode("ascii")
    fields: dict[str, Any] = {
        "method": scope.get("method", ""),
        "path": path,
        "status": status,
        "ms": round(ms, 1),
        "bytes": sent,
    }
    line = " ".join(f"{name}={value}" for name, value in fields.items())
    logger.info("%s", line, extra={"access": fields})


def log_to_stderr() -> None:
    """Print the access log on stderr (`openruns server`), once per process."""
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
