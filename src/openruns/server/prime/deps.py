"""
What every Prime route needs: the caller (a Bearer token or `x-api-key`, as the platform's
internal root sends it), the team a new run belongs to, the run a body names, and the
conversions between the platform's documents and an openruns run.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from ...errors import ConfigurationError
from ...spec import CONFIG_SOURCE_KEY, MAX_ERROR_CHARS, ConfigSource, cut_text
from ..auth import ANONYMOUS, Principal, acting_team, check_run, principal_for
from ..errors import bad_request, forbidden
from ..limits import note_caller
from ..state import ServerState, server_state
from ..store.rows import RunRow

__all__ = [
    "PrimeCaller",
    "config_document",
    "default_name",
    "default_step",
    "iso_time",
    "new_run_team",
    "prime_run",
    "terminal_status",
    "viewer_url",
]

_bearer = HTTPBearer(auto_error=False, description="an openruns API key or run token")
_api_key = APIKeyHeader(
    name="x-api-key", auto_error=False, description="the same token (the internal root sends it)"
)


async def _prime_caller(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    api_key: Annotated[str | None, Depends(_api_key)],
) -> Principal:
    state = server_state(request)
    if not state.auth_enabled:
        return ANONYMOUS
    token = credentials.credentials if credentials else api_key
    principal = await principal_for(token, state.store.secret, state.store)
    state.limiter.check(principal.bucket)
    note_caller(request, principal.bucket)
    return principal


PrimeCaller = Annotated[Principal, Depends(_prime_caller)]


def new_run_team(state: ServerState, caller: Principal, requested: str | None) -> str:
    """
    The team a run created through the Prime wire belongs to: auth.acting_team, its refusal
    naming PRIME_TEAM_ID; a run token cannot create runs.
    """
    if not caller.can_create:
        raise forbidden("a run token cannot create runs; use an API key as PRIME_API_KEY")
    return acting_team(
        caller, requested, hint="set PRIME_TEAM_ID={team} (or pass team_id={team!r})"
    )


async def prime_run(
    state: ServerState, caller: Principal, run_id: str, write: bool = True
) -> RunRow:
    """The run a Prime call names; 404 when this caller cannot see it (as the native API)."""
    if not run_id or len(run_id) > 256:
        raise bad_request("invalid_run_id", "run_id must be a run id of this server")
    run = await state.store.get_run(run_id, caller.team_id)
    check_run(caller, run, run_id, write=write)
    assert run is not None
    return run


def config_document(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """
    A Prime config (eval `metadata`, training `run_config`) as an openruns run config: a
    config file the SDK sent as `{"config_source": {...}}` is the config itself, byte for
    byte; any other mapping is kept as JSON text.
    """
    if not value:
        return None
    source = value.get(CONFIG_SOURCE_KEY)
    if len(value) == 1 and isinstance(source, dict) and isinstance(source.get("text"), str):
        try:
            return ConfigSource(
                text=source["text"],
                format=source.get("format") or "text",
                filename=source.get("filename") or None,
            ).to_dict()
        except ConfigurationError:  # an unknown format or an oversized file: kept as JSON
            pass
    try:
        return {"format": "json", "text": ConfigSource.from_mapping(value).text}
    except ConfigurationError as exc:  # e.g. an integer beyond 64 bits
        raise bad_request("invalid_config", f"the config cannot be stored: {exc}") from exc


_PRIME_TERMINAL = {"completed", "failed", "cancelled", "crashed"}


def terminal_status(status: str, message: str | None) -> tuple[str, str | None]:
    """
    An openruns (status, error) from the platform's words. The SDK sends cancelled and crashed
    runs as FAILED/failed with `cancelled: ...` / `crashed: ...` in the message (the platform
    has no such statuses); openruns has them, so they are restored.
    """
    if message is not None:
        # The run must close whatever the message's length (prime-runs does not cap it for
        # training runs); what is kept is said. The limit is the native finish's `error`.
        message = cut_text(message, MAX_ERROR_CHARS)
    word = status.strip().lower()
    if word not in _PRIME_TERMINAL:
        raise bad_request(
            "invalid_status",
            f"status must be one of {', '.join(sorted(_PRIME_TERMINAL))} "
            f"(in any case), got {status!r}",
        )
    if word == "failed" and message:
        for prefix in ("cancelled", "crashed"):
            if message == prefix or message.startswith(prefix + ":"):
                rest = message[len(prefix) :].lstrip(":").strip()
                return prefix, rest or prefix
    return word, message or None


def viewer_url(request: Request, state: ServerState, run_id: str) -> str:
    """The run's dashboard page, absolute (the SDK prints it)."""
    base = state.settings.public_url or str(request.base_url)
    return f"{base.rstrip('/')}/runs/{run_id}"


def default_step(run: RunRow) -> int | None:
    """
    The step an episode that names none is indexed at: 0 in an eval run (an evaluation is one
    step, as for the native SDK, whose step counter starts at 0), none in a training run (its
    episodes carry `run.work.step`; one that does not is not at any step).
    """
    return 0 if run["kind"] == "eval" else None


def default_name(stem: str | None) -> str:
    return f"{stem or 'run'}-{secrets.token_hex(4)}"


def iso_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat()
