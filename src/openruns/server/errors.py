"""
The server's error type and its JSON form.

Every error answer is `{"error": {"code": "<snake_case>", "message": "<what was wrong>"}}` with
the status that fits. Handlers and the store raise `ApiError`; app.py installs the handlers that
turn it (and FastAPI's own validation errors) into that body. ApiError subclasses Starlette's
HTTPException so that FastAPI re-raises it untouched when it comes out of body parsing (the
body-limit middleware raises it from `receive()`).
"""

from __future__ import annotations

import errno

from starlette.exceptions import HTTPException

__all__ = [
    "ApiError",
    "bad_request",
    "conflict",
    "forbidden",
    "insufficient_storage",
    "is_disk_full",
    "not_found",
    "overloaded",
    "too_large",
    "unauthorized",
]


class ApiError(HTTPException):
    """An error answer: HTTP status, a stable snake_case code, a message for a human."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(status_code=status, detail=message, headers=headers)
        self.code = code
        self.message = message

    def body(self) -> dict[str, dict[str, str]]:
        return {"error": {"code": self.code, "message": self.message}}


def bad_request(code: str, message: str) -> ApiError:
    return ApiError(400, code, message)


def unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message, {"WWW-Authenticate": "Bearer"})


def forbidden(message: str) -> ApiError:
    return ApiError(403, "forbidden", message)


def not_found(message: str) -> ApiError:
    return ApiError(404, "not_found", message)


def conflict(code: str, message: str) -> ApiError:
    return ApiError(409, code, message)


def too_large(code: str, message: str, headers: dict[str, str] | None = None) -> ApiError:
    return ApiError(413, code, message, headers)


def overloaded(message: str, retry_after: int = 1, code: str = "overloaded") -> ApiError:
    return ApiError(503, code, message, {"Retry-After": str(retry_after)})


# Retry-After of a full disk: space comes back when someone frees it, not in a second.
DISK_FULL_RETRY_S = 30
_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def insufficient_storage(where: str) -> ApiError:
    """507: `where` (the database, the blob store) is out of space. Nothing of the request was
    kept; the same request succeeds once space is freed, so clients retry it later."""
    return ApiError(
        507,
        "insufficient_storage",
        f"{where} is out of space: nothing of this request was stored; retry once space is freed",
        {"Retry-After": str(DISK_FULL_RETRY_S)},
    )


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in _DISK_FULL_ERRNOS
