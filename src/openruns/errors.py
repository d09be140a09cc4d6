"""
Every exception openruns raises, grouped by cause.

    OpenrunsError
    ├── ConfigurationError      bad arguments or settings (init() raises it before any work)
    ├── RunFinishedError        log_* / update_summary on a run that is finished or finishing
    └── APIError                an error status from the server (message, status_code, code)
        ├── BadRequestError         400/413/415/422: the request is wrong; a replay cannot help
        ├── UnauthorizedError       401
        ├── ForbiddenError          403
        ├── NotFoundError           404
        ├── ConflictError           409
        ├── RetryableAPIError       429/502/503/504 (retry_after: seconds, when the server said)
        └── TransportError          no HTTP status: connect error, reset, timeout
            └── APITimeoutError

`is_transient(exc)` tells whether a failed request is worth replaying later.
"""

from __future__ import annotations

__all__ = [
    "APIError",
    "APITimeoutError",
    "BadRequestError",
    "ConfigurationError",
    "ConflictError",
    "ForbiddenError",
    "NotFoundError",
    "OpenrunsError",
    "RetryableAPIError",
    "RunFinishedError",
    "TransportError",
    "UnauthorizedError",
    "error_for_status",
    "is_transient",
]


class OpenrunsError(Exception):
    """Base class of every openruns exception."""


class ConfigurationError(OpenrunsError):
    """An argument, environment variable or config-file value is invalid or missing."""


class RunFinishedError(OpenrunsError):
    """A record was logged to a run that is finished (or finishing)."""


class APIError(OpenrunsError):
    """The server answered with an error status."""

    def __init__(self, message: str, status_code: int | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.code = code


class BadRequestError(APIError):
    """The server rejected the request itself (400, 413, 415, 422)."""


class UnauthorizedError(APIError):
    """401: the API key or run token is missing or invalid."""


class ForbiddenError(APIError):
    """403: the key is valid but may not do this."""


class NotFoundError(APIError):
    """404: no such run (or not visible to this key)."""


class ConflictError(APIError):
    """409: the request conflicts with the run's state (e.g. it is already finished)."""


class RetryableAPIError(APIError):
    """429 / 502 / 503 / 504: the server may accept the same request later."""

    def __init__(
        self,
        message: str,
        status_code: int | None = None,
        code: str | None = None,
        retry_after: float | None = None,
    ):
        super().__init__(message, status_code, code)
        self.retry_after = retry_after


class TransportError(APIError):
    """No HTTP answer: the connection failed, was reset, or the body could not be read."""


class APITimeoutError(TransportError):
    """The request timed out."""


_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequestError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    413: BadRequestError,
    415: BadRequestError,
    422: BadRequestError,
    429: RetryableAPIError,
    502: RetryableAPIError,
    503: RetryableAPIError,
    504: RetryableAPIError,
}


def error_for_status(
    status_code: int, message: str, code: str | None = None, retry_after: float | None = None
) -> APIError:
    """The most specific APIError for an HTTP status."""
    cls = _BY_STATUS.get(status_code, APIError)
    if cls is RetryableAPIError:
        return RetryableAPIError(message, status_code, code, retry_after)
    return cls(message, status_code, code)


def is_transient(exc: BaseException) -> bool:
    """True when the same request may succeed later (server busy, gateway, network)."""
    return isinstance(exc, (RetryableAPIError, TransportError))
