"""
The SDK's HTTP client for the openruns server: one pooled httpx client, auth, translation of
every failure into openruns.errors, and the retry policy.

Retry policy (`retrying`): 429 and 503 wait for `Retry-After` (seconds or an HTTP date, at most
60 s); connect errors, timeouts, resets, 500, 502 and 504 back off exponentially with ±20 %
jitter; anything else is final. Every upload carries an Idempotency-Key, so replaying a request
whose answer was lost (an ambiguous failure) can never store it twice.
"""

from __future__ import annotations

import email.utils
import platform
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import httpx
import orjson

from ..errors import (
    APIError,
    APITimeoutError,
    RetryableAPIError,
    TransportError,
    error_for_status,
    is_transient,
)

__all__ = ["ApiClient", "backoff_delay", "retryable", "retrying"]

T = TypeVar("T")
MAX_RETRY_AFTER = 60.0
DEFAULT_TIMEOUT = httpx.Timeout(60.0, connect=10.0)
_ABANDONED: list[httpx.Client] = []


class ApiClient:
    """
    Requests to `<base_url>/api/v1`. Thread-safe (httpx.Client is); one per process: after
    fork the child makes a new one and drops the parent's connections without closing them.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        max_connections: int = 16,
    ):
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self._timeout = timeout
        self._max_connections = max_connections
        self._client = self._new_client()

    def _new_client(self) -> httpx.Client:
        headers = {"User-Agent": f"openruns/{_version()} python/{platform.python_version()}"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return httpx.Client(
            base_url=self.base_url + "/api/v1",
            headers=headers,
            timeout=self._timeout,
            limits=httpx.Limits(
                max_connections=self._max_connections,
                max_keepalive_connections=self._max_connections,
            ),
        )

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> Any:
        """One attempt (`timeout`: seconds, else the client's). Returns the decoded JSON body;
        raises an openruns APIError."""
        body = content
        sent_headers = dict(headers or {})
        if json is not None:
            body = orjson.dumps(json)
            sent_headers["Content-Type"] = "application/json"
        try:
            response = self._client.request(
                method,
                path,
                content=body,
                headers=sent_headers,
                params=params,
                timeout=self._timeout if timeout is None else timeout,
            )
        except httpx.TimeoutException as exc:
            raise APITimeoutError(f"{method} {path}: timed out ({type(exc).__name__})") from exc
        except httpx.HTTPError as exc:
            raise TransportError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        if response.status_code >= 400:
            raise _error_from(response, method, path)
        if not response.content:
            return {}
        try:
            return orjson.loads(response.content)
        except orjson.JSONDecodeError as exc:
            raise APIError(
                f"{method} {path}: the server answered {response.status_code} with non-JSON",
                response.status_code,
            ) from exc

    def drop(self) -> None:
        """After fork: a fresh pool; the parent's sockets are dropped, never closed."""
        # Kept referenced: garbage collection would close the inherited sockets from the child.
        _ABANDONED.append(self._client)
        self._client = self._new_client()

    def close(self) -> None:
        self._client.close()


def _error_from(response: httpx.Response, method: str, path: str) -> APIError:
    code, message = None, response.text[:500] or response.reason_phrase
    try:
        body = orjson.loads(response.content)
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict):
            code, message = error.get("code"), error.get("message", message)
        elif isinstance(body, dict) and "detail" in body:
            message = str(body["detail"])
    except orjson.JSONDecodeError:
        pass
    retry_after = _retry_after(response.headers.get("Retry-After"))
    return error_for_status(
        response.status_code,
        f"{method} {path}: HTTP {response.status_code}: {message}",
        code,
        retry_after,
    )


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    return min(MAX_RETRY_AFTER, max(0.0, seconds))


def backoff_delay(attempt: int, error: BaseException | None = None) -> float:
    """Seconds to wait before retry `attempt` (0-based): Retry-After, else 0.5·2^n ±20 %, ≤ 30."""
    if isinstance(error, RetryableAPIError) and error.retry_after is not None:
        return error.retry_after
    return min(30.0, 0.5 * 2**attempt) * random.uniform(0.8, 1.2)


def retryable(exc: BaseException) -> bool:
    return is_transient(exc) or (isinstance(exc, APIError) and exc.status_code == 500)


def retrying(
    call: Callable[[], T],
    *,
    deadline: float,
    stop: threading.Event | None = None,
) -> T:
    """
    Call until it succeeds, fails for good, or the next wait would pass `deadline`
    (time.monotonic()); waits are cut short when `stop` is set. The last error is raised.
    """
    attempt = 0
    while True:
        try:
            return call()
        except APIError as exc:
            if not retryable(exc):
                raise
            delay = backoff_delay(attempt, exc)
            if time.monotonic() + delay > deadline:
                raise
            if stop is not None:
                if stop.wait(delay):
                    raise
            else:
                time.sleep(delay)
            attempt += 1


def _version() -> str:
    from .. import __version__

    return __version__
