"""
`POST /graphql`: W&B's GraphQL endpoint, on graphql-core with the schema in schema.graphql.

    {"query": "query Viewer { viewer { entity } }", "variables": {}, "operationName": "Viewer"}
      -> {"data": {"viewer": {"entity": "team-a"}}}

A document is parsed and validated against the schema once (the SDK sends the same few
documents again and again; kept in a bounded cache), then executed with the resolvers of
resolvers.py and artifacts.py. What the schema does not have (an operation the SDK may send
that openruns does not serve, a field it does not know) fails validation: the answer is a
GraphQL error naming it (HTTP 200, as W&B answers GraphQL errors), and the server logs it once
per distinct message, never a 500. A resolver's ApiError becomes a GraphQL error with its code,
except those the SDK must see as HTTP: 401 (a wrong key: the SDK's own auth error), 429 and
503 (overload, with Retry-After, which the SDK honours).
"""

from __future__ import annotations

import functools
import logging
from collections import OrderedDict
from importlib import resources
from typing import TYPE_CHECKING, Any, cast

import orjson
from fastapi import APIRouter, Request

from ..errors import ApiError, bad_request
from ..handlers import JSON
from . import artifacts, resolvers
from .deps import wandb_caller

if TYPE_CHECKING:
    from graphql import DocumentNode, GraphQLError, GraphQLSchema

__all__ = ["router", "schema"]

logger = logging.getLogger("openruns.server.wandb")
router = APIRouter(tags=["wandb"], include_in_schema=False)

_HTTP_STATUSES = (401, 429, 503, 507, 413, 408)  # errors the SDK must see as HTTP answers
_CACHE_SIZE = 256
_MAX_LOGGED = 1000


@functools.cache
def schema() -> GraphQLSchema:
    """The schema with its resolvers, built at the endpoint's first request: graphql-core and
    the schema's build are a tenth of `openruns server`'s start-up (and of every test server's),
    paid only by a server that W&B's SDK talks to."""
    from graphql import build_schema

    text = resources.files(__package__).joinpath("schema.graphql").read_text("utf-8")
    # Its scalars (JSONString, Int64, the whole-object inputs) pass values through as they are.
    built = build_schema(text)
    for module in (resolvers, artifacts):
        for type_name, fields in module.RESOLVERS.items():
            graphql_type: Any = built.get_type(type_name)
            for field_name, resolve in fields.items():
                graphql_type.fields[field_name].resolve = resolve
    return built


_documents: OrderedDict[str, tuple[DocumentNode | None, list[GraphQLError]]] = OrderedDict()
_logged: set[str] = set()


@router.post("/graphql")
async def graphql_endpoint(request: Request) -> JSON:
    """An error answered as HTTP (a wrong key, overload, a bad body) still has GraphQL's form,
    `{"errors": [{"message": ...}]}`: the SDK reads the message from there."""
    try:
        return await _answer(request)
    except ApiError as exc:
        body = {"errors": [{"message": exc.message, "extensions": {"code": exc.code}}]}
        return JSON(body, exc.status_code, headers=exc.headers)


async def _answer(request: Request) -> JSON:
    from graphql import ExecutionResult, execute
    from graphql.pyutils import is_awaitable

    caller = await wandb_caller(request)
    body = await request.body()  # a JSON route's: limits.BodyLimit caps it
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise bad_request("invalid_json", f"the body is not JSON: {exc}") from exc
    if not isinstance(payload, dict) or not isinstance(payload.get("query"), str):
        raise bad_request("invalid_graphql", 'the body must be {"query": "...", "variables": {}}')
    variables = payload.get("variables") or {}
    if not isinstance(variables, dict):
        raise bad_request("invalid_graphql", "variables must be an object")
    operation = payload.get("operationName")
    document, errors = _document(payload["query"])
    if document is None:
        _log_once(operation, errors)
        return JSON({"errors": [e.formatted for e in errors]})
    executed = execute(
        schema(),
        document,
        context_value=caller,
        variable_values=variables,
        operation_name=operation if isinstance(operation, str) and operation else None,
    )
    result = await executed if is_awaitable(executed) else cast(ExecutionResult, executed)
    answer: dict[str, Any] = {"data": result.data}
    if result.errors:
        for error in result.errors:
            original = error.original_error
            if isinstance(original, ApiError) and original.status_code in _HTTP_STATUSES:
                raise original
        answer["errors"] = [_formatted(e) for e in result.errors]
        _log_once(operation, result.errors)
    return JSON(answer)


def _document(query: str) -> tuple[DocumentNode | None, list[GraphQLError]]:
    """The parsed, validated document (None and the errors when it is not valid), cached."""
    from graphql import GraphQLError, parse, validate

    cached = _documents.get(query)
    if cached is not None:
        _documents.move_to_end(query)
        return cached
    try:
        document: DocumentNode | None = parse(query)
    except GraphQLError as exc:
        found: tuple[DocumentNode | None, list[GraphQLError]] = (None, [exc])
    else:
        assert document is not None
        errors = validate(schema(), document)
        found = (None, errors) if errors else (document, [])
    _documents[query] = found
    if len(_documents) > _CACHE_SIZE:
        _documents.popitem(last=False)
    return found


def _formatted(error: GraphQLError) -> dict[str, Any]:
    out = dict(error.formatted)
    original = error.original_error
    if isinstance(original, ApiError):
        out["extensions"] = {"code": original.code, "status": original.status_code}
    return out


def _log_once(operation: object, errors: list[GraphQLError]) -> None:
    """Each distinct error once per process: what the SDK asked for that is not served."""
    for error in errors:
        key = f"{operation}: {error.message}"
        if key in _logged or len(_logged) >= _MAX_LOGGED:
            continue
        _logged.add(key)
        logger.warning("openruns: W&B GraphQL %s answered with an error: %s", operation, key)
