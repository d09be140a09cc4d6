"""
Who is calling: API keys, per-run tokens, and what each may see.

- An API key (`ork_...`, `openruns keys create --team T`) acts for its team: it sees and writes
  that team's runs, and creates runs in it. Another team's run answers 404, never 403, so ids
  do not leak.
- A per-run token (`orr_<hmac>_<run id>`) is minted at run creation for its creator: it reads
  and writes that one run only (other runs: 404 to read, 403 to write; it cannot create runs).
  It is HMAC-SHA256 of the run id under the server secret, so any replica can check it without
  a lookup.
- With auth off (loopback, or --insecure) every request may do everything; the server is then
  a single-user tracker and team ids are only labels.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Any

from .errors import forbidden, not_found, unauthorized
from .store.keys import KEY_PREFIX

__all__ = [
    "RUN_TOKEN_PREFIX",
    "Principal",
    "check_run",
    "principal_for",
    "run_token",
    "run_token_id",
]

RUN_TOKEN_PREFIX = "orr_"
_MAC_CHARS = 64


@dataclass(frozen=True)
class Principal:
    """The caller. team_id None: every team; run_id set: that run only; bucket: rate limit key
    (None: not limited)."""

    team_id: str | None
    run_id: str | None
    bucket: str | None

    @property
    def can_create(self) -> bool:
        return self.run_id is None


ANONYMOUS = Principal(team_id=None, run_id=None, bucket=None)


def run_token(secret: bytes, run_id: str) -> str:
    mac = hmac.new(secret, run_id.encode(), hashlib.sha256).hexdigest()
    return f"{RUN_TOKEN_PREFIX}{mac}_{run_id}"


def run_token_id(secret: bytes, token: str) -> str | None:
    """The run a token is valid for, or None when it is not a valid run token."""
    body = token[len(RUN_TOKEN_PREFIX) :]
    mac, sep, run_id = body[:_MAC_CHARS], body[_MAC_CHARS : _MAC_CHARS + 1], body[_MAC_CHARS + 1 :]
    if sep != "_" or not run_id:
        return None
    expected = hmac.new(secret, run_id.encode(), hashlib.sha256).hexdigest()
    return run_id if hmac.compare_digest(mac.encode(), expected.encode()) else None


async def principal_for(token: str | None, secret: bytes, store: Any) -> Principal:
    """Authenticate a bearer token (auth on); 401 when it is missing or not valid."""
    if not token:
        raise unauthorized(
            "this server requires authentication: send `Authorization: Bearer <API key>` "
            "(an admin creates keys with `openruns keys create --team TEAM`)"
        )
    if token.startswith(RUN_TOKEN_PREFIX):
        run_id = run_token_id(secret, token)
        if run_id is None:
            raise unauthorized("the run token is not valid on this server")
        return Principal(team_id=None, run_id=run_id, bucket=f"run:{run_id}")
    if token.startswith(KEY_PREFIX):
        found = await store.team_of_key(token)
        if found is None:
            raise unauthorized("the API key is not valid (unknown or revoked)")
        key_id, team_id = found
        return Principal(team_id=team_id, run_id=None, bucket=f"key:{key_id}")
    raise unauthorized("the bearer token is neither an API key (ork_...) nor a run token (orr_...)")


def check_run(principal: Principal, run: dict[str, Any] | None, run_id: str, write: bool) -> None:
    """404 unless `principal` may see `run`; 403 for a write by another run's token."""
    if run is None or (principal.team_id is not None and run["team_id"] != principal.team_id):
        raise not_found(f"no run {run_id!r}")
    if principal.run_id is not None and principal.run_id != run["id"]:
        if write:
            raise forbidden("this run token may only write to its own run")
        raise not_found(f"no run {run_id!r}")
