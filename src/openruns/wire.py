"""
The SDK's one client of the openruns v1 API: every call the SDK makes is written here once, and
used by the online backend, the server sink, `openruns sync` and `openruns.api`.

    wire = WireClient.from_settings(settings)
    run = wire.create_run({"id": run_id, "kind": "train"}, key=run_id)
    page = wire.get("/runs", {"kind": "train", "limit": 50})
    wire.upload(run_id, "episodes", batch.parts, key=batch.key)
    retrying(lambda: wire.get_run(run_id), deadline=time.monotonic() + 30)

What a failure means is decided in one place, `disposition(exc)`: RETRY (the same request may
succeed later: 429, 500, 502, 503, 504, 408, no answer), REJECT (this request is wrong and a
replay cannot help: 400, 409, 413, 415, 422, other 4xx), or STOP (this client may not go on:
401, 403, 404, a failed TLS handshake). `retrying` retries what is RETRY with jittered
exponential backoff, honouring Retry-After (seconds or an HTTP date, at most 60 s), within a
deadline. Every upload carries an Idempotency-Key, so replaying one whose answer was lost can
never store it twice.
"""

from __future__ import annotations

import email.utils
import enum
import functools
import os
import platform
import random
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, cast
from urllib.parse import quote

import httpx
import orjson

from ._version import __version__
from .batches import BATCH_CONTENT_TYPE
from .errors import (
    APIError,
    APITimeoutError,
    ForbiddenError,
    NotFoundError,
    RetryableAPIError,
    TLSError,
    TransportError,
    UnauthorizedError,
    error_for_status,
)
from .rundir import upload_target

__all__ = [
    "BATCH_CONTENT_TYPE",
    "Disposition",
    "WireClient",
    "backoff_delay",
    "disposition",
    "retrying",
    "tls_context",
]

T = TypeVar("T")
MAX_RETRY_AFTER = 60.0
MAX_BACKOFF = 30.0
_ABANDONED: list[httpx.Client] = []
_ALWAYS_THERE = ("/health", "/runs")  # GET answers 404 only for a wrong base URL


def tls_context() -> ssl.SSLContext:
    """httpx's default verifying context (certifi's bundle, or SSL_CERT_FILE / SSL_CERT_DIR),
    built once a process and shared by its clients: building one costs ~30 ms of CPU, paid
    before on every run opened and again in every forked child. Keyed by those variables, so
    a changed one is honoured."""
    return _context_for(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))


@functools.lru_cache(maxsize=4)
def _context_for(cafile: str | None, capath: str | None) -> ssl.SSLContext:
    return httpx.create_ssl_context()  # reads the same variables


class Disposition(enum.Enum):
    RETRY = "retry"  # the same request may succeed later
    REJECT = "reject"  # the request itself is wrong; replaying it cannot help
    STOP = "stop"  # this client may not go on (credentials, or no such run)


def disposition(exc: BaseException) -> Disposition:
    """What a failed call means for its caller (see the module docstring)."""
    if isinstance(exc, TLSError):
        return Disposition.STOP  # a wrong scheme or certificate: a replay fails the same way
    if isinstance(exc, (RetryableAPIError, TransportError)):
        return Disposition.RETRY
    if isinstance(exc, (UnauthorizedError, ForbiddenError, NotFoundError)):
        return Disposition.STOP
    if isinstance(exc, APIError) and exc.status_code in (408, 500):
        return Disposition.RETRY
    return Disposition.REJECT


class WireClient:
    """
    Requests to `<base_url>/api/v1`. Thread-safe (httpx.Client is); one per run and process:
    after fork the child calls `drop()` and gets a new pool without closing the parent's
    connections. Every method makes one attempt and raises an openruns APIError on failure.
    `transport` replaces httpx's network transport (e.g. `httpx.MockTransport(handler)`); the
    timeouts and limits then apply only as far as that transport honours them.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        request_timeout: float = 60.0,
        connect_timeout: float = 10.0,
        retry_timeout: float = 30.0,
        max_connections: int = 16,
        base_url_origin: str = "the base_url setting",
        transport: httpx.BaseTransport | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.base_url_origin = base_url_origin  # what set base_url, named in errors (issue 24)
        self.api_key = api_key
        self.request_timeout = request_timeout
        self.connect_timeout = connect_timeout
        self.retry_timeout = retry_timeout  # what callers retry a call for (see `retrying`)
        self._max_connections = max_connections
        self._transport = transport  # None: httpx's own; tests pass an httpx.MockTransport
        self._client = self._new_client()

    @classmethod
    def from_settings(cls, settings: Any) -> WireClient:
        assert settings.base_url
        return cls(
            settings.base_url,
            settings.api_key,
            request_timeout=settings.request_timeout,
            connect_timeout=settings.connect_timeout,
            retry_timeout=settings.retry_timeout,
            base_url_origin=settings.origin("base_url"),
        )

    # -- runs ---------------------------------------------------------------------------------

    def health(self, *, timeout: float | None = None) -> dict[str, Any]:
        return cast(dict[str, Any], self._call("GET", "/health", timeout=timeout))

    def create_run(self, body: Mapping[str, Any], *, key: str) -> dict[str, Any]:
        """Create a run, or get the one an earlier call with this key (or body id) made."""
        return cast(
            dict[str, Any], self._call("POST", "/runs", json=body, headers={"Idempotency-Key": key})
        )

    def get_run(self, run_id: str, *, timeout: float | None = None) -> dict[str, Any]:
        return cast(dict[str, Any], self._call("GET", _run(run_id), timeout=timeout))

    def patch_run(
        self, run_id: str, changes: Mapping[str, Any], *, timeout: float | None = None
    ) -> dict[str, Any]:
        return cast(
            dict[str, Any], self._call("PATCH", _run(run_id), json=changes, timeout=timeout)
        )

    def finish_run(
        self, run_id: str, body: Mapping[str, Any], *, timeout: float | None = None
    ) -> dict[str, Any]:
        return cast(
            dict[str, Any], self._call("POST", f"{_run(run_id)}/finish", json=body, timeout=timeout)
        )

    def delete_run(self, run_id: str, *, timeout: float | None = None) -> dict[str, Any]:
        """Delete the run with everything it owns; its tombstone (what was removed)."""
        return cast(dict[str, Any], self._call("DELETE", _run(run_id), timeout=timeout))

    def heartbeat(self, run_id: str, *, timeout: float | None = None) -> dict[str, Any]:
        return cast(
            dict[str, Any], self._call("POST", f"{_run(run_id)}/heartbeat", timeout=timeout)
        )

    # -- bulk uploads -------------------------------------------------------------------------

    def upload(
        self,
        run_id: str,
        stream: str,
        parts: Sequence[bytes],
        *,
        key: str,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """
        One batch (rundir's batch format: header frame, then zstd frames) to its stream
        (metrics, annotations, episodes or traces). The parts are sent one after another, never
        joined: a multi-MB copy would hold the GIL.
        """
        path, headers = upload_target(quote(run_id, safe=""), stream)
        headers.update(
            {
                "Idempotency-Key": key,
                "Content-Type": BATCH_CONTENT_TYPE,
                "Content-Encoding": "zstd",
                "Content-Length": str(sum(len(p) for p in parts)),
            }
        )
        return cast(
            dict[str, Any],
            self._call("POST", path, content=_chunks(parts), headers=headers, timeout=timeout),
        )

    # -- reads --------------------------------------------------------------------------------

    def get(self, path: str, query: Mapping[str, Any] | None = None) -> Any:
        """A read (`path` under /api/v1, its parts quoted by the caller): runs, metrics,
        episodes, steps, annotations, search; None values in `query` are left out."""
        return self._call("GET", path, params=query)

    # -- alert rules (openruns alerts) ---------------------------------------------------------

    def create_alert_rule(self, body: Mapping[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", "/alerts/rules", json=body)
        return result

    def delete_alert_rule(self, rule_id: int) -> None:
        self._call("DELETE", f"/alerts/rules/{int(rule_id)}")

    # -- connections --------------------------------------------------------------------------

    def drop(self) -> None:
        """After fork: a fresh pool; the parent's sockets are dropped, never closed."""
        # Kept referenced: garbage collection would close the inherited sockets from the child.
        _ABANDONED.append(self._client)
        self._client = self._new_client()

    def close(self) -> None:
        self._client.close()

    def _new_client(self) -> httpx.Client:
        headers = {"User-Agent": f"openruns/{__version__} python/{platform.python_version()}"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return httpx.Client(
            base_url=self.base_url + "/api/v1",
            headers=headers,
            timeout=self._timeout(None),
            limits=httpx.Limits(
                max_connections=self._max_connections,
                max_keepalive_connections=self._max_connections,
            ),
            transport=self._transport,
            verify=tls_context(),
        )

    def _timeout(self, seconds: float | None) -> httpx.Timeout:
        total = self.request_timeout if seconds is None else seconds
        return httpx.Timeout(total, connect=min(total, self.connect_timeout))

    def _call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        content: Any = None,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> Any:
        sent_headers = dict(headers or {})
        if json is not None:
            content = orjson.dumps(json)
            sent_headers["Content-Type"] = "application/json"
        query = None if params is None else {k: v for k, v in params.items() if v is not None}
        try:
            response = self._client.request(
                method,
                path,
                content=content,
                headers=sent_headers,
                params=query,
                timeout=self._timeout(timeout),
            )
        except httpx.TimeoutException as exc:
            raise APITimeoutError(f"{method} {path}: timed out ({type(exc).__name__})") from exc
        except httpx.HTTPError as exc:
            raise self._transport_error(exc, method, path) from exc
        if response.status_code >= 400:
            error = _error_from(response, method, path)
            if response.status_code == 404 and method == "GET" and path in _ALWAYS_THERE:
                # Every openruns server has these: the base URL is wrong (issue 24).
                raise NotFoundError(
                    f"{method} {response.request.url}: HTTP 404: no openruns API at this URL; "
                    f"check base_url {self.base_url!r} (set by {self.base_url_origin}): the "
                    f"server's address, e.g. http://127.0.0.1:8765, with no path",
                    404,
                    error.code,
                )
            raise error
        if not response.content:
            return {}
        try:
            return orjson.loads(response.content)
        except orjson.JSONDecodeError as exc:
            raise APIError(
                f"{method} {path}: the server answered {response.status_code} with non-JSON",
                response.status_code,
            ) from exc

    def _transport_error(self, exc: httpx.HTTPError, method: str, path: str) -> TransportError:
        """No answer: refused (nothing listens, known at once), a failed TLS handshake (not
        worth a replay), or anything else (worth one)."""
        causes = _causes(exc)
        tls = next((c for c in causes if isinstance(c, ssl.SSLError)), None)
        if tls is not None:
            hint = ""
            if self.base_url.startswith("https://"):
                plain = "http://" + self.base_url.removeprefix("https://")
                hint = (
                    f"; if the server speaks plain HTTP, as `openruns server` does without a "
                    f"TLS proxy in front, use {plain}"
                )
            return TLSError(
                f"{method} {self.base_url}/api/v1{path}: the TLS handshake failed ({tls}); "
                f"base_url is set by {self.base_url_origin}{hint}"
            )
        error = TransportError(f"{method} {path}: {type(exc).__name__}: {exc}")
        error.refused = any(isinstance(c, ConnectionRefusedError) for c in causes)
        return error


def _causes(exc: BaseException) -> list[BaseException]:
    """`exc` and what it was raised from (httpx wraps httpcore, which wraps the OSError)."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def retrying(
    call: Callable[[], T],
    *,
    deadline: float,
    stop: threading.Event | None = None,
    max_backoff: float = MAX_BACKOFF,
) -> T:
    """
    Call until it succeeds, fails for good (anything `disposition` does not call RETRY), or the
    next wait would pass `deadline` (time.monotonic()); waits end early when `stop` is set. The
    last error is raised. `max_backoff` caps the waits a Retry-After does not set.
    """
    attempt = 0
    while True:
        try:
            return call()
        except APIError as exc:
            if disposition(exc) is not Disposition.RETRY:
                raise
            delay = backoff_delay(attempt, exc, max_backoff)
            if time.monotonic() + delay > deadline:
                raise
            if stop is not None:
                if stop.wait(delay):
                    raise
            else:
                time.sleep(delay)
            attempt += 1


def backoff_delay(
    attempt: int, error: BaseException | None = None, cap: float = MAX_BACKOFF
) -> float:
    """Seconds before retry `attempt` (0-based): the server's Retry-After as given (already at
    most 60 s), else 0.5·2^n s capped at `cap` (30 s by default), then ±20 % jitter, so that
    clients waiting at the cap still spread out."""
    if isinstance(error, RetryableAPIError) and error.retry_after is not None:
        return error.retry_after
    return min(cap, 0.5 * 2.0 ** min(attempt, 16)) * random.uniform(0.8, 1.2)


def _chunks(parts: Sequence[bytes]) -> Iterator[bytes]:
    yield from parts


def _run(run_id: str) -> str:
    return "/runs/" + quote(run_id, safe="")


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
