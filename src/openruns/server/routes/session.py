"""
Dashboard sessions: sign in with an API key, once, instead of keeping the key in the browser.

    POST   /session  {"key": "ork_..."}   sets the session cookie (HttpOnly, SameSite=Strict,
                                          Secure over HTTPS, Path=/), for --session-hours
    GET    /session                       whether auth is on, and who is signed in
    DELETE /session                       signs out: the session ends on every replica

The cookie holds 32 random bytes; the server keeps only their SHA-256 (store/sessions.py),
with the key it was opened with, so revoking the key ends its sessions, and sign-out deletes
the row. Sessions live in the database so that any replica honours them and sign-out is
immediate; a cookie signed by the server secret would have needed neither the table nor a
lookup, but could not be revoked before it expires.

Sign-in is rate-limited per client address (limits.SIGN_IN_RATE) and, like every request a
session makes, must come from this server's own pages (security.check_same_origin). The key is
read from the body only: never from a URL, never logged.
"""

from __future__ import annotations

import secrets
import time
from typing import Annotated

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from starlette.responses import Response

from ..auth import SESSION_COOKIE, hash_session_token
from ..errors import bad_request, unauthorized
from ..handlers import JSON
from ..security import check_same_origin, client_address, is_https
from ..store import keys, sessions
from ..store.keys import KEY_PREFIX
from .deps import State

__all__ = ["router"]

router = APIRouter(tags=["session"])


class SignIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: Annotated[str, StringConstraints(min_length=1, max_length=256)] = Field(
        description="an API key (ork_...), as `openruns keys create` printed it"
    )


class SessionOut(BaseModel):
    auth: bool = Field(description="whether this server requires authentication")
    signed_in: bool
    team_id: str | None
    expires_at: float | None


@router.get("/session", response_model=SessionOut)
async def session(request: Request, state: State) -> JSON:
    """Whether this server requires sign-in, and the team and expiry of this browser's
    session (if any)."""
    if not state.auth_enabled:
        return JSON(_session_out(False, None, None))
    cookie = request.cookies.get(SESSION_COOKIE)
    found = (
        await state.store.read(sessions.session_caller, hash_session_token(cookie), time.time())
        if cookie
        else None
    )
    if found is None:
        return JSON(_session_out(True, None, None))
    _, team_id, expires_at = found
    return JSON(_session_out(True, team_id, expires_at))


@router.post(
    "/session",
    response_model=SessionOut,
    responses={
        400: {"description": "this server does not require sign-in (auth is off)"},
        401: {"description": "the key is not valid (unknown, revoked or not an API key)"},
    },
)
async def sign_in(body: SignIn, request: Request, state: State) -> Response:
    """Open a session for the key's team: the answer sets the session cookie."""
    check_same_origin(request, state.settings)
    if not state.auth_enabled:
        raise bad_request("auth_off", "this server does not require sign-in (auth is off)")
    state.sign_in_limiter.check(client_address(request))
    key = body.key.strip()
    found = await state.store.read(keys.team_of_key, key) if key.startswith(KEY_PREFIX) else None
    if found is None:
        raise unauthorized(
            "this is not a valid API key (unknown or revoked; keys start with ork_ and come "
            "from `openruns keys create --team TEAM`)"
        )
    key_id, team_id = found
    token = secrets.token_urlsafe(32)
    lifetime = state.settings.session_lifetime
    now = time.time()
    expires_at = now + lifetime
    await state.store.write(
        sessions.open_session, hash_session_token(token), key_id, team_id, now, expires_at
    )
    response = JSON(_session_out(True, team_id, expires_at))
    response.set_cookie(
        SESSION_COOKIE,
        token,
        max_age=int(lifetime),
        path="/",
        secure=is_https(request),
        httponly=True,
        samesite="strict",
    )
    return response


@router.delete("/session", status_code=204)
async def sign_out(request: Request, state: State) -> Response:
    """End this browser's session (on every replica) and clear its cookie."""
    check_same_origin(request, state.settings)
    cookie = request.cookies.get(SESSION_COOKIE)
    if cookie and state.auth_enabled:
        await state.store.write(sessions.close_session, hash_session_token(cookie))
    response = Response(status_code=204)
    response.delete_cookie(
        SESSION_COOKIE, path="/", secure=is_https(request), httponly=True, samesite="strict"
    )
    return response


def _session_out(auth: bool, team_id: str | None, expires_at: float | None) -> dict[str, object]:
    return {
        "auth": auth,
        "signed_in": team_id is not None,
        "team_id": team_id,
        "expires_at": expires_at,
    }
