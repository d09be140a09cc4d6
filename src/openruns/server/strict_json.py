"""
JSON bodies may not hold NaN or infinities: 400 naming the field, never a silent null.

FastAPI parses request bodies with Python's `json`, which accepts the non-standard `NaN`,
`Infinity` and `-Infinity`; stored through orjson they would become null without a word. This
middleware looks at every JSON body FastAPI will parse (bulk uploads are NDJSON parsed by
orjson, which refuses them with the line number) and answers 400 `non_finite_number` naming
the first such field, e.g. `summary.loss`. One route converts and counts instead: the Prime
wire's metrics row (`POST /rft/metrics`) leaves such a value out and names it in `ignored`.

The scan costs one substring search per body; only a body that contains `NaN` or `Infinity`
somewhere (in a string, say) is parsed a second time to find the field.
"""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import ApiError, bad_request
from .handlers import error_response

__all__ = ["RejectNonFinite", "non_finite_field"]

_BODY_METHODS = ("POST", "PUT", "PATCH", "DELETE")
_JSON_TYPE = re.compile(rb"^\s*application/(?:[\w.+-]*\+)?json\s*(?:;|$)", re.IGNORECASE)
# The routes that read their bodies themselves, as NDJSON, multipart or bytes (limits.py), and
# the Prime wire's metrics row, which converts instead: a NaN value is left out and named in
# its answer's `ignored`, as the platform does; and the W&B wire's (server/wandb/), whose
# history drops a non-finite value as the native SDK does (the Go core writes them).
_OWN_BODY_PATH = re.compile(
    r"^/api/v1/runs/[^/]+/(metrics|episodes|annotations)$"
    r"|^/api/(v1|internal)/evaluations/[^/]+/samples$"
    r"|^/api/v1/(traces|prime/objects/.+)$"
    r"|^/api/(v1|internal)/rft/metrics$"
    r"|^/graphql$|^/files/[^/]+/[^/]+/[^/]+/file_stream$|^/api/v1/wandb/files/.+$"
)


class _NonFinite:
    def __init__(self, text: str):
        self.text = text


def non_finite_field(body: bytes) -> tuple[str, str] | None:
    """(field path, constant) of the first NaN / Infinity / -Infinity in a JSON body, or None
    (also when the body is not valid JSON: the JSON parser's own error says so)."""
    if b"NaN" not in body and b"Infinity" not in body:
        return None
    try:
        value = json.loads(body, parse_constant=_NonFinite)
    except (ValueError, RecursionError):
        return None
    return _find(value, "")


def _find(value: Any, path: str) -> tuple[str, str] | None:
    if isinstance(value, _NonFinite):
        return path or "body", value.text
    if isinstance(value, dict):
        items: Any = ((f"{path}.{k}" if path else str(k), v) for k, v in value.items())
    elif isinstance(value, list):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for where, child in items:
        found = _find(child, where)
        if found is not None:
            return found
    return None


class RejectNonFinite:
    """ASGI middleware: 400 for a JSON body holding NaN or an infinity (see the module)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not _is_parsed_json(scope):
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        try:
            while True:
                message = await receive()
                messages.append(message)
                if message["type"] != "http.request" or not message.get("more_body"):
                    break
        except ApiError as exc:  # the body-size cap, raised from receive()
            await error_response(exc.status_code, exc.code, exc.message, exc.headers)(
                scope, receive, send
            )
            return
        body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.request")
        found = non_finite_field(body)
        if found is not None:
            field, constant = found
            error = bad_request(
                "non_finite_number",
                f"{field}: {constant} is not a number JSON allows; send null or leave it out",
            )
            await error_response(error.status_code, error.code, error.message)(scope, receive, send)
            return
        replay = iter(messages)

        async def replayed() -> Message:
            for message in replay:
                return message
            return await receive()

        await self.app(scope, replayed, send)


def _is_parsed_json(scope: Scope) -> bool:
    if scope["type"] != "http" or scope["method"] not in _BODY_METHODS:
        return False
    if _OWN_BODY_PATH.match(scope["path"]):
        return False
    content_type = next((v for k, v in scope["headers"] if k == b"content-type"), None)
    return content_type is None or bool(_JSON_TYPE.match(content_type))
