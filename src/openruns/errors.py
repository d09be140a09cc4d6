"""
Every exception openruns raises, grouped by cause.

    OpenrunsError (alias PrimeRunsError)
    ├── ConfigurationError      bad arguments or settings (init() raises it before any work);
    │                           also a ValueError
    ├── EnvironmentResolutionError  an environment could not be resolved (prime-runs' name)
    ├── RunFinishedError        log_* / update_summary on a run that is finished or finishing
    └── APIError                an error status from the server (message, status_code, code)
        ├── BadRequestError         400/413/415/422: the request is wrong; a replay cannot help
        │                           (alias ValidationRejectedError)
        ├── UnauthorizedError       401
        ├── PaymentRequiredError    402
        ├── ForbiddenError          403
        ├── NotFoundError           404
        ├── ConflictError           409 (alias LineFormatConflictError)
        ├── RetryableAPIError       429/502/503/504/507 (retry_after: seconds, when the server
        │                           said; 507: the server's disk is full, nothing was stored)
        └── TransportError          no HTTP status: connect error, reset, timeout
            │                       (`refused`: nothing listens at the address)
            ├── APITimeoutError
            └── TLSError            the TLS handshake failed (https:// to a plain HTTP
                                    server, a certificate refused): not transient

What a failed request means for its caller (replay it later, give it up, or stop) is decided
in one place: `openruns.wire.disposition`.

The prime-runs names (PrimeRunsError, ValidationRejectedError, LineFormatConflictError) are
aliases, so `except` clauses written for prime-runs catch the same failures. One difference:
in prime-runs, APIError is not a PrimeRunsError (it comes from prime-traces); here every
exception is an OpenrunsError, so `except PrimeRunsError` also catches server errors.
"""

from __future__ import annotations

__all__ = [
    "APIError",
    "APITimeoutError",
    "BadRequestError",
    "ConfigurationError",
    "ConflictError",
    "EnvironmentResolutionError",
    "ForbiddenError",
    "LineFormatConflictError",
    "NotFoundError",
    "OpenrunsError",
    "PaymentRequiredError",
    "PrimeRunsError",
    "RetryableAPIError",
    "RunFinishedError",
    "TLSError",
    "TransportError",
    "UnauthorizedError",
    "ValidationRejectedError",
    "error_for_status",
]


class OpenrunsError(Exception):
    """Base class of every openruns exception."""


class ConfigurationError(OpenrunsError, ValueError):
    """An argument, environment variable or config-file value is invalid or missing (a
    ValueError too: `except ValueError` around init() catches a bad argument)."""


class EnvironmentResolutionError(OpenrunsError):
    """An environment named in init() could not be resolved (kept for prime-runs code)."""


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


class PaymentRequiredError(APIError):
    """402: the account cannot pay for this."""


class ForbiddenError(APIError):
    """403: the key is valid but may not do this."""


class NotFoundError(APIError):
    """404: no such run (or not visible to this key)."""


class ConflictError(APIError):
    """409: the request conflicts with the run's state (e.g. it is already finished)."""


class RetryableAPIError(APIError):
    """429 / 502 / 503 / 504 / 507: the server may accept the same request later."""

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
    """No HTTP answer: the connection failed, was reset, or the body could not be read.
    `refused`: the connection was refused (nothing listens there), known at once."""

    refused: bool = False


class APITimeoutError(TransportError):
    """The request timed out."""


class TLSError(TransportError):
    """The TLS handshake failed: an https:// URL for a plain HTTP server, or a certificate
    that is not trusted. A replay fails the same way, so it is not transient (issue 24)."""


# prime-runs' names of the same errors.
PrimeRunsError = OpenrunsError
ValidationRejectedError = BadRequestError
LineFormatConflictError = ConflictError

_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequestError,
    401: UnauthorizedError,
    402: PaymentRequiredError,
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
    507: RetryableAPIError,  # the server's disk is full: keep the data, retry later
}


def error_for_status(
    status_code: int, message: str, code: str | None = None, retry_after: float | None = None
) -> APIError:
    """The most specific APIError for an HTTP status."""
    cls = _BY_STATUS.get(status_code, APIError)
    if cls is RetryableAPIError:
        return RetryableAPIError(message, status_code, code, retry_after)
    return cls(message, status_code, code)
