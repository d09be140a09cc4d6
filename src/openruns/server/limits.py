"""
Request limits: per-caller rate limits (429), body size caps (413) and body-read deadlines
(408). Ingest admission (which uploads run at once) is admission.py's.

The rate limiter and the ingest gate count in this process only: with several replicas each
enforces its own share. They are protective limits, not quotas, so that is enough, and it keeps
the server free of shared state beyond the database and the blob store.
"""

from __future__ import annotations

import asyncio
import math
import re
import time

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import ApiError, too_large
from .handlers import error_response

__all__ = [
    "SIGN_IN_BURST",
    "SIGN_IN_RATE",
    "BodyLimit",
    "RateLimiter",
    "note_caller",
]

# Bulk uploads get the larger body cap: the native ingest routes, the Prime wire's
# (server/prime/: eval sample rows, Prime Traces batches, presigned Parquet PUTs), and the W&B
# wire's (server/wandb/: the file stream, run files).
_INGEST_PATH = re.compile(
    r"^/api/v1/runs/[^/]+/(metrics|episodes)$"
    r"|^/api/(v1|internal)/evaluations/[^/]+/samples$"
    r"|^/api/v1/(traces|prime/objects/.+)$"
    r"|^/files/[^/]+/[^/]+/[^/]+/file_stream$"
    r"|^/api/v1/wandb/files/.+$"
)
_MAX_BUCKETS = 10_000
# Dashboard sign-ins per client address: 10 at once, then one every 6 s. An API key is 32
# random bytes, so this is not what stops guessing; it keeps a client from turning sign-in
# into a flood of key lookups.
SIGN_IN_RATE = 1 / 6
SIGN_IN_BURST = 10


class RateLimiter:
    """A token bucket per caller: `rate` requests per second, bursts up to `burst`. `what`
    names the limited requests in the 429's message."""

    def __init__(self, rate: float, burst: int, what: str = "requests with this key"):
        self.rate = rate
        self.burst = max(1, burst)
        self.what = what
        self._buckets: dict[str, tuple[float, float]] = {}  # caller -> (tokens, at)

    def check(self, caller: str | None) -> None:
        """Take one token for `caller`; 429 with Retry-After when there is none."""
        if caller is None or self.rate <= 0:
            return
        now = time.monotonic()
        tokens, at = self._buckets.get(caller, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.rate)
        if tokens < 1.0:
            self._buckets[caller] = (tokens, now)
            wait = max(1, math.ceil((1.0 - tokens) / self.rate))
            raise ApiError(
                429,
                "rate_limited",
                f"too many {self.what}: at most {self.rate:.3g} per second "
                f"(bursts of {self.burst}); retry in {wait} s",
                {"Retry-After": str(wait)},
            )
        if len(self._buckets) >= _MAX_BUCKETS and caller not in self._buckets:
            self._prune(now)
        self._buckets[caller] = (tokens - 1.0, now)

    def _prune(self, now: float) -> None:
        """Forget callers whose bucket has refilled: they are back to the default state."""
        full = [
            c for c, (t, at) in self._buckets.items() if t + (now - at) * self.rate >= self.burst
        ]
        for caller in full:
            del self._buckets[caller]


def note_caller(request: Request, bucket: str | None) -> None:
    """Remember who the request's caller is (its rate-limit bucket), for
    `admission.ingest_owner`."""
    request.state.caller_bucket = bucket


class BodyLimit:
    """
    ASGI middleware, every route: the body-size cap and the body-read deadline.

    - 413 at once, before any of the body is read, when `Content-Length` says more than the
      route's cap (ingest uploads get the larger one); else 413 once the body passes it.
    - 408 when a body comes too slowly: `grace` seconds after the app first reads it, it must
      have arrived at `min_rate` bytes/s on average, and no `idle` seconds may pass without a
      byte. A client that declares a big body and then trickles or stalls holds nothing for
      long.

    Any answer given before the request's body was read whole (these, a 401, a 429, a 404 of
    an unknown run...) closes the connection (`Connection: close`), so an unread body is never
    waited for nor read to its end.
    """

    def __init__(
        self,
        app: ASGIApp,
        json_limit: int,
        ingest_limit: int,
        min_rate: float = 0.0,
        grace: float = 0.0,
        idle: float = 0.0,
    ):
        self.app = app
        self.json_limit = json_limit
        self.ingest_limit = ingest_limit
        self.min_rate = min_rate
        self.grace = grace
        self.idle = idle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.ingest_limit if _INGEST_PATH.match(scope["path"]) else self.json_limit
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _answer(_body_too_large(limit), scope, receive, send)
            return
        # The body's clock starts when the app first asks for it: an upload waiting for its
        # slot in the ingest gate (admission.py) is not reading, so not slow.
        started = last = 0.0
        received = 0
        complete = not _has_body(scope)

        async def limited() -> Message:
            nonlocal received, last, complete, started
            if complete:  # the body is in: what follows is waiting for a disconnect
                return await receive()
            if not started:
                started = last = time.monotonic()
            timeout = self._time_left(started, last, received)
            try:
                message = await asyncio.wait_for(receive(), timeout)
            except TimeoutError:
                raise self._too_slow(received) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                last = time.monotonic()
                if received > limit:
                    raise _body_too_large(limit)
                complete = not message.get("more_body", False)
            return message

        async def closing(message: Message) -> None:
            if message["type"] == "http.response.start" and not complete:
                headers = list(message.get("headers", []))
                if not any(name.lower() == b"connection" for name, _ in headers):
                    message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, limited, closing)

    def _time_left(self, started: float, last: float, received: int) -> float | None:
        """Seconds the next piece of the body may take (None: no limit)."""
        deadlines = []
        if self.idle > 0:
            deadlines.append(last + self.idle)
        if self.min_rate > 0:
            deadlines.append(started + self.grace + received / self.min_rate)
        if not deadlines:
            return None
        return max(0.0, min(deadlines) - time.monotonic())

    def _too_slow(self, received: int) -> ApiError:
        return ApiError(
            408,
            "body_too_slow",
            f"the request body came too slowly ({received} bytes received): after "
            f"{self.grace:g} s a body must arrive at {self.min_rate / 1024:g} KiB/s or more, "
            f"with no pause of {self.idle:g} s; send it again",
            {"Connection": "close"},
        )


def _has_body(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"transfer-encoding" or (name == b"content-length" and value != b"0"):
            return True
    return False


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


def _body_too_large(limit: int) -> ApiError:
    return too_large(
        "body_too_large",
        f"the request body is over the limit of {limit} bytes",
        {"Connection": "close"},
    )


async def _answer(error: ApiError, scope: Scope, receive: Receive, send: Send) -> None:
    await error_response(error.status_code, error.code, error.message, error.headers)(
        scope, receive, send
    )
