"""
Responses and error handlers: JSON bodies through orjson, and every error as
`{"error": {"code", "message"}}`, whatever raised it (ApiError, FastAPI's request validation,
Starlette's 404/405, or a bug: 500 `internal_error`, logged). A client that hangs up mid-body
is logged as such in one line, not as an error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from .errors import ApiError

__all__ = ["JSON", "document_errors", "error_statuses", "install_handlers"]

logger = logging.getLogger("openruns.server")

_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
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
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None
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


def install_handlers(
    app: FastAPI, not_found_page: Callable[[Request], Response | None] | None = None
) -> None:
    """`not_found_page(request)`: the answer to a 404 of no route when it is not the JSON error
    (the dashboard's HTML page for a browser), or None for the JSON error."""

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        page = not_found_page(request) if exc.status_code == 404 and not_found_page else None
        return page if page is not None else await _http_error(request, exc)

    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(ClientDisconnect, _client_disconnected)
    app.add_exception_handler(Exception, _internal_error)


# -- the errors in the OpenAPI document ----------------------------------------------------------

_ERROR_SCHEMA = {
    "title": "Error",
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {"type": "string", "description": "stable, snake_case"},
                "message": {"type": "string", "description": "what was wrong, for a human"},
            },
        }
    },
}
_WHY = {
    400: "bad input (the message names it), or NaN in a JSON body",
    401: "authentication required or not valid (auth on)",
    403: "not allowed: a run token writing another run, another team, a cross-site request",
    404: "no such run or record (or not visible to this caller)",
    408: "the request body came too slowly (a minimum rate after a grace, no long pause)",
    409: "a conflict with the run's state (finished, finished otherwise, an id in use)",
    410: "the stored segment holding the record is damaged (named)",
    413: "the body is over its size limit",
    415: "Content-Encoding not supported",
    422: "a field or parameter is not valid (named)",
    429: "rate limited, or this caller has its most uploads in flight: retry after Retry-After",
    503: "overloaded, or the database or blob store is unavailable: retry after Retry-After",
    507: "the database or blob store is out of space: nothing stored; retry after Retry-After",
}
# Every call may be refused before its route runs (auth, rate limit, body cap, validation) and
# reach the database (503, 507: even reads may mark a silent run crashed); calls that send a
# body may also conflict with the run's state or send an encoding the server does not take.
_EVERY_CALL = (400, 401, 403, 404, 408, 413, 422, 429, 503, 507)
_WITH_BODY = (409, 415)
_UNAUTHENTICATED = ("/api/v1/health",)


def error_statuses(path: str, method: str) -> tuple[int, ...]:
    """The error statuses an operation of the API may answer (besides its own, declared on
    its route)."""
    if path in _UNAUTHENTICATED:
        return (408, 413)  # only the body's limits apply
    if method.upper() in ("GET", "HEAD"):
        return _EVERY_CALL
    return _EVERY_CALL + _WITH_BODY


def document_errors(app: FastAPI) -> None:
    """Make the app's OpenAPI document list, for every operation, each error status it can
    answer (error_statuses, plus what the route declares) with the one error body, so a schema
    fuzzer finds no status it was not told of."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()
            schema.setdefault("components", {}).setdefault("schemas", {})["Error"] = _ERROR_SCHEMA
            body = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
            for path, item in schema.get("paths", {}).items():
                for method, operation in item.items():
                    responses = operation.setdefault("responses", {})
                    for status in error_statuses(path, method):
                        responses.setdefault(str(status), {"description": _WHY[status]})
                    for status, response in responses.items():
                        if status[0] in "45":  # our error body, FastAPI's 422 included
                            response["content"] = body
                            response.setdefault("description", _WHY.get(int(status), "error"))
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
