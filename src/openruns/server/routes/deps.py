"""
What every route needs: the caller (authenticated and rate-limited), the run it names (checked
against the caller), opaque cursors, and the public form of a run. The caller is a bearer token
(an API key or a run token), else the dashboard's session cookie, whose state-changing requests
must come from this origin (security.check_same_origin).
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any

import orjson
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ..auth import (
    ANONYMOUS,
    SESSION_COOKIE,
    Principal,
    check_run,
    principal_for,
    principal_for_session,
)
from ..errors import bad_request
from ..limits import note_caller
from ..security import check_same_origin
from ..state import ServerState, server_state
from ..store.rows import RunRow

__all__ = [
    "Caller",
    "State",
    "decode_cursor",
    "encode_cursor",
    "listed",
    "public_run",
    "readable_run",
    "writable_run",
]

_bearer = HTTPBearer(
    auto_error=False, description="an API key (ork_...) or a per-run token (orr_...)"
)


async def _caller(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    state = server_state(request)
    if not state.auth_enabled:
        return ANONYMOUS
    cookie = request.cookies.get(SESSION_COOKIE)
    if credentials is None and cookie:
        principal = await principal_for_session(cookie, state.store)
        check_same_origin(request, state.settings)
    else:
        token = credentials.credentials if credentials else None
        principal = await principal_for(token, state.store.secret, state.store)
    state.limiter.check(principal.bucket)
    note_caller(request, principal.bucket)
    return principal


Caller = Annotated[Principal, Depends(_caller)]
State = Annotated[ServerState, Depends(server_state)]


async def readable_run(state: ServerState, caller: Principal, run_id: str) -> RunRow:
    run = await state.store.get_run(run_id, caller.team_id)
    check_run(caller, run, run_id, write=False)
    assert run is not None
    return run


async def writable_run(state: ServerState, caller: Principal, run_id: str) -> RunRow:
    run = await state.store.get_run(run_id, caller.team_id)
    check_run(caller, run, run_id, write=True)
    assert run is not None
    return run


def public_run(state: ServerState, run: RunRow) -> dict[str, Any]:
    out = {k: v for k, v in run.items() if k not in ("seq", "create_key")}
    out["url"] = state.run_url(run["id"])
    return out


def listed(text: str) -> list[str]:
    """The items of a comma-separated parameter, each once, in order."""
    return list(dict.fromkeys(item for item in text.split(",") if item))


def encode_cursor(value: list[Any]) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(value)).decode().rstrip("=")


def decode_cursor(cursor: str | None, shape: tuple[tuple[type, ...], ...]) -> list[Any] | None:
    """
    The list a cursor encodes, each item of the types in `shape` (ints within 64 bits, as SQL
    needs them); 400 when it is not a cursor this server handed out.
    """
    if cursor is None:
        return None
    try:
        value = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError):
        value = None
    if (
        not isinstance(value, list)
        or len(value) != len(shape)
        or not all(_fits(item, types) for item, types in zip(value, shape, strict=True))
    ):
        raise bad_request("invalid_cursor", "the cursor is not one this server handed out")
    return value


def _fits(item: Any, types: tuple[type, ...]) -> bool:
    if isinstance(item, bool) or not isinstance(item, types):
        return False
    return not isinstance(item, int) or -(2**63) <= item < 2**63
