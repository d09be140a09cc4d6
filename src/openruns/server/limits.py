"""
Request limits: per-caller rate limits (429), ingest admission (503), body size caps (413).

The rate limiter and the ingest gate count in this process only: with several replicas each
enforces its own share. They are protective limits, not quotas, so that is enough, and it keeps
the server free of shared state beyond the database and the blob store.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import ApiError, overloaded, too_large

__all__ = ["SIGN_IN_BURST", "SIGN_IN_RATE", "BodyLimit", "IngestGate", "RateLimiter", "Ticket"]

# Bulk uploads get the larger body cap: the native ingest routes, and the Prime wire's
# (server/prime/: eval sample rows, Prime Traces batches, presigned Parquet PUTs).
_INGEST_PATH = re.compile(
    r"^/api/v1/runs/[^/]+/(metrics|episodes)$"
    r"|^/api/(v1|internal)/evaluations/[^/]+/samples$"
    r"|^/api/v1/(traces|prime/objects/.+)$"
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


class Ticket:
    """One admitted ingest request; `add(n)` counts body bytes as they arrive."""

    def __init__(self, gate: IngestGate):
        self.gate = gate
        self.bytes = 0

    def add(self, n: int) -> None:
        self.bytes += n
        self.gate.bytes += n
        # A request alone in the gate is never refused, however big: it would be refused forever.
        if self.gate.bytes > self.gate.max_bytes and self.gate.bytes > self.bytes:
            raise overloaded(
                "the server has too many upload bytes in flight; retry shortly", retry_after=1
            )


class IngestGate:
    """Admits at most `max_requests` ingest requests and `max_bytes` of their bodies at once."""

    def __init__(self, max_requests: int, max_bytes: int):
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.active = 0
        self.bytes = 0

    @contextmanager
    def admit(self) -> Iterator[Ticket]:
        if self.active >= self.max_requests:
            raise overloaded("the server has too many uploads in flight; retry shortly")
        self.active += 1
        ticket = Ticket(self)
        try:
            yield ticket
        finally:
            self.active -= 1
            self.bytes -= ticket.bytes


class BodyLimit:
    """ASGI middleware: 413 once a body passes its cap (ingest uploads get the larger one)."""

    def __init__(self, app: ASGIApp, json_limit: int, ingest_limit: int):
        self.app = app
        self.json_limit = json_limit
        self.ingest_limit = ingest_limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.ingest_limit if _INGEST_PATH.match(scope["path"]) else self.json_limit
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise too_large(
                        "body_too_large", f"the request body is over the limit of {limit} bytes"
                    )
            return message

        await self.app(scope, limited, send)
