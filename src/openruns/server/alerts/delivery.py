"""
Webhook deliveries: a task of the server's lifespan that sends the queued ones.

    task = asyncio.create_task(follow(state))

Every `alert_interval` seconds it claims the deliveries due (store/alerts.claim_deliveries: a
lease, so one replica sends each) and POSTs them at once, never from a request. An answer
2xx is delivered; a transport error, 408, 429 or 5xx is tried again after
`alert_retry_delay` x 2^(attempt-1), times a jitter in [0.5, 1.5), up to `alert_attempts`
attempts; any other answer fails at once (the receiver refused it: retrying cannot help).
Redirects are not followed.

The body: `chat` is `{"text": ..., "content": ...}`, which Slack and Discord incoming
webhooks both take; `generic` is the event itself (rule, condition, run, level, title, text,
at). Every request is signed like Stripe's and GitHub's:

    X-Openruns-Timestamp: 1790000000
    X-Openruns-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>
    X-Openruns-Delivery: <delivery id>   (the same on every attempt: a receiver dedupes by it)

A receiver recomputes the HMAC over the timestamp, a ".", and the raw body, compares in
constant time, and refuses timestamps older than a few minutes (docs/server.md, Alerts).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import random
import time
from typing import Any

import httpx
import orjson

from ..._version import __version__
from ...wire import tls_context
from ..errors import ApiError
from ..state import ServerState
from ..store import alerts

__all__ = ["backoff", "body", "deliver_round", "follow", "sign"]

logger = logging.getLogger("openruns.server")

BATCH = 32
TIMEOUT = 10.0
# A claimed delivery is another replica's again this long after the claim (a stopped sender).
LEASE = 4 * TIMEOUT
MAX_DELAY = 3600.0
CHAT_CHARS = 1900  # Discord's content is at most 2000 characters
RETRY_STATUSES = frozenset({408, 425, 429})


async def follow(state: ServerState) -> None:
    """Send forever (until cancelled)."""
    async with httpx.AsyncClient(
        timeout=TIMEOUT,
        follow_redirects=False,
        headers={"User-Agent": f"openruns/{__version__}"},
        verify=tls_context(),
    ) as client:
        while True:
            await asyncio.sleep(state.settings.alert_interval)
            try:
                # A full batch: more may be due (a burst of failures), so go on at once.
                while await deliver_round(state, client) == BATCH:
                    pass
            except ApiError as exc:
                logger.warning("openruns: alert delivery skipped: %s", exc.message)
            except Exception:
                logger.warning("openruns: alert delivery failed; retrying", exc_info=True)


async def deliver_round(state: ServerState, client: httpx.AsyncClient) -> int:
    """Send the deliveries due now; returns how many were attempted."""
    now = time.time()
    claimed = await state.store.write(alerts.claim_deliveries, now, LEASE, BATCH)
    if not claimed:
        return 0
    outcomes = await asyncio.gather(*(_send(client, d) for d in claimed))
    settings = state.settings
    for delivery, (status_code, error) in zip(claimed, outcomes, strict=True):
        done = time.time()
        attempts = delivery["attempts"]
        if status_code is not None and 200 <= status_code < 300:
            outcome, next_at = "delivered", done
        elif _retryable(status_code) and attempts < settings.alert_attempts:
            outcome = "pending"
            next_at = done + backoff(attempts, settings.alert_retry_delay)
        else:
            outcome, next_at = "failed", done
        if outcome != "delivered":
            logger.info(
                "openruns: webhook delivery %d, attempt %d: %s",
                delivery["id"],
                attempts,
                error or f"HTTP {status_code}",
            )
        await state.store.write(
            alerts.finish_delivery, delivery["id"], outcome, status_code, error, next_at, done
        )
    return len(claimed)


def _retryable(status_code: int | None) -> bool:
    return status_code is None or status_code >= 500 or status_code in RETRY_STATUSES


async def _send(
    client: httpx.AsyncClient, delivery: dict[str, Any]
) -> tuple[int | None, str | None]:
    """(HTTP status, None) or (None, what went wrong); never raises."""
    payload = body(delivery["format"], delivery["event"])
    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "X-Openruns-Timestamp": timestamp,
        "X-Openruns-Signature": "v1=" + sign(delivery["secret"], timestamp, payload),
        "X-Openruns-Delivery": str(delivery["id"]),
    }
    try:
        response = await client.post(delivery["url"], content=payload, headers=headers)
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}"[:500]
    except Exception as exc:  # a URL httpx cannot use after all: said in the log, not raised
        return None, f"{type(exc).__name__}: {exc}"[:500]
    error = None if response.is_success else f"HTTP {response.status_code}: {response.text[:200]}"
    return response.status_code, error


def sign(secret: str, timestamp: str, payload: bytes) -> str:
    """Hex HMAC-SHA256 of `timestamp`, ".", and the body, keyed by the rule's secret."""
    message = timestamp.encode() + b"." + payload
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def backoff(attempts: int, base: float) -> float:
    """The wait before attempt `attempts + 1`: exponential, with jitter, capped."""
    return float(min(MAX_DELAY, base * 2 ** (attempts - 1)) * random.uniform(0.5, 1.5))


def body(format: str, event: dict[str, Any]) -> bytes:
    if format == "generic":
        return orjson.dumps(event)
    text = chat_text(event)
    return orjson.dumps({"text": text, "content": text})


def chat_text(event: dict[str, Any]) -> str:
    run = event.get("run") or {}
    who = run.get("name") or run.get("id") or "a run"
    if run.get("project") not in (None, "default"):
        who = f"{run['project']}/{who}"
    line = f"[{event.get('level', 'info')}] {event.get('title', '')}: {who}"
    text = event.get("text") or ""
    message = f"{line}\n{text}" if text else line
    if run.get("url"):
        message = f"{message}\n{run['url']}"
    return message if len(message) <= CHAT_CHARS else message[: CHAT_CHARS - 1] + "…"
