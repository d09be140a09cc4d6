"""
Responses and error handlers: JSON bodies through orjson, and every error as
`{"error": {"code", "message"}}`, whatever raised it (ApiError, FastAPI's request validation,
Starlette's 404/405, or a bug: 500 `internal_error`, logged). A client that hangs up mid-body
is logged as such in one line, not as an error.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from .errors import ApiError

__all__ = ["JSON", "install_handlers"]

logger = logging.getLogger("openruns.server")

_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    429: "rate_limited",
    503: "overloaded",
    507: "insufficient_storage",
}


class JSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        # OPT_NON_STR_KEYS: SQLAlchemy row keys are `quoted_name`, a str subclass.
        return orjson.dumps(content, option=orjson.OPT_NON_STR_KEYS)


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSON:
    return JSON({"error": {"code": code, "message": message}}, status, headers)


async def _api_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.status_code, exc.code, exc.message, exc.headers)


async def _http_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = _CODES.get(exc.status_code, "error")
    return error_response(exc.status_code, code, str(exc.detail), exc.headers)


async def _validation_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    for err in errors:
        if err.get("type") == "json_invalid":
            detail = (err.get("ctx") or {}).get("error", "JSON decode error")
            where = err.get("loc", ("body", "?"))[-1]
            return error_response(
                400, "invalid_json", f"the body is not valid JSON: {detail} at position {where}"
            )
    parts = [f"{_location(err.get('loc', ()))}: {err.get('msg', 'invalid')}" for err in errors[:5]]
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return error_response(422, "invalid_request", "; ".join(parts) + more)


def _location(loc: Any) -> str:
    return ".".join(str(part) for part in loc) or "request"


async def _client_disconnected(request: Request, exc: Exception) -> Response:
    # The client hung up while sending its body: nobody will read an answer, nothing of the
    # request was stored, and it is not the server's fault (no traceback, no error).
    logger.info(
        "openruns: the client hung up during %s %s; nothing stored",
        request.method,
        request.url.path,
    )
    return error_response(400, "client_disconnected", "the client hung up before its body ended")


async def _internal_error(request: Request, exc: Exception) -> Response:
    logger.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(500, "internal_error", "internal server error (logged on the server)")


def install_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(ClientDisconnect, _client_disconnected)
    app.add_exception_handler(Exception, _internal_error)
