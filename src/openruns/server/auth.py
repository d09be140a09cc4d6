"""
Who is calling: API keys, per-run tokens, dashboard sessions, and what each may see.

- An API key (`ork_...`, `openruns keys create --team T`) acts for its team: it sees and writes
  that team's runs, and creates runs in it. Another team's run answers 404, never 403, and run
  ids are per team, so nothing says whether another team uses an id.
- A per-run token (`orr_<hmac>_<run id>`) is minted at run creation for its creator: it reads
  and writes that one run only (other runs: 404 to read, 403 to write; it cannot create runs).
  The HMAC-SHA256 under the server secret covers the run's team and id; the runs carrying that
  id (usually one) are looked up to find the team it was minted for. A token minted before
  ids were per team (an HMAC of the id alone) still reaches the run it was minted for: the
  first run with that id, since every later one was made after ids became per team.
- A dashboard session (the `openruns_session` cookie, opened by signing in with an API key)
  acts as that key; see routes/session.py. Only the SHA-256 of its token is stored.
- With auth off (loopback, or --insecure) every request may do everything; the server is then
  a single-user tracker and team ids are only labels.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import forbidden, not_found, unauthorized
from .store import keys, runs, sessions
from .store.keys import KEY_PREFIX
from .store.rows import RunRow

if TYPE_CHECKING:
    from .store.store import Store

__all__ = [
    "DEFAULT_TEAM",
    "RUN_TOKEN_PREFIX",
    "SESSION_COOKIE",
    "Principal",
    "acting_team",
    "check_run",
    "hash_session_token",
    "principal_for",
    "principal_for_session",
    "run_token",
    "url_signature",
]

RUN_TOKEN_PREFIX = "orr_"
SESSION_COOKIE = "openruns_session"
DEFAULT_TEAM = "default"  # the team of what is created with auth off and no team named
_MAC_CHARS = 64


@dataclass(frozen=True)
class Principal:
    """The caller. team_id None: every team; run_id set: that run only; bucket: rate limit key
    (None: not limited); via_session: authenticated by the dashboard's cookie (so a
    state-changing request must come from the dashboard's own origin)."""

    team_id: str | None
    run_id: str | None
    bucket: str | None
    via_session: bool = False

    @property
    def can_create(self) -> bool:
        return self.run_id is None


ANONYMOUS = Principal(team_id=None, run_id=None, bucket=None)


def acting_team(
    caller: Principal, requested: str | None, *, noun: str = "team", hint: str = ""
) -> str:
    """
    The team a call acts in when it creates something (a run on any wire, an alert rule) or
    names a team (a W&B entity): the caller's own team, which a request naming another one
    may not change (403 naming both, as a `noun` ("team", W&B's "entity"), then `hint`, a
    format string given `team`, saying how to fix it on the caller's side); with auth off,
    the team requested, else `default`. An empty name counts as none (PRIME_TEAM_ID="").
    """
    team = caller.team_id
    requested = requested or None
    if team is None:
        return requested or DEFAULT_TEAM
    if requested not in (None, team):
        message = f"this API key belongs to {noun} {team!r}, not {requested!r}"
        raise forbidden(f"{message}: {hint.format(team=team)}" if hint else message)
    return team


def run_token(secret: bytes, team_id: str, run_id: str) -> str:
    return f"{RUN_TOKEN_PREFIX}{_mac(secret, _token_message(team_id, run_id))}_{run_id}"


def _token_message(team_id: str, run_id: str) -> str:
    return team_id + "\x00" + run_id


def _mac(secret: bytes, message: str) -> str:
    return hmac.new(secret, message.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


def url_signature(secret: bytes, purpose: bytes, message: str) -> str:
    """An HMAC-SHA256 of `message` under a key derived from the server secret for `purpose`
    (so a signature for one use never passes for another, nor for a run token): the signed
    upload URLs of the Prime and W&B wires."""
    key = hmac.new(secret, purpose, hashlib.sha256).digest()
    return hmac.new(key, message.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


def hash_session_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


async def principal_for(token: str | None, secret: bytes, store: Store) -> Principal:
    """Authenticate a bearer token (auth on); 401 when it is missing or not valid."""
    if not token:
        raise unauthorized(
            "this server requires authentication: send `Authorization: Bearer <API key>` "
            "(an admin creates keys with `openruns keys create --team TEAM`), or sign in to "
            "the dashboard at /signin"
        )
    if token.startswith(RUN_TOKEN_PREFIX):
        return await _run_token_principal(token, secret, store)
    if token.startswith(KEY_PREFIX):
        found = await store.read(keys.team_of_key, token)
        if found is None:
            raise unauthorized("the API key is not valid (unknown or revoked)")
        key_id, team_id = found
        return Principal(team_id=team_id, run_id=None, bucket=f"key:{key_id}")
    raise unauthorized("the bearer token is neither an API key (ork_...) nor a run token (orr_...)")


async def _run_token_principal(token: str, secret: bytes, store: Store) -> Principal:
    body = token[len(RUN_TOKEN_PREFIX) :]
    mac, sep, run_id = body[:_MAC_CHARS], body[_MAC_CHARS : _MAC_CHARS + 1], body[_MAC_CHARS + 1 :]
    if sep == "_" and run_id and len(run_id) <= 256:
        candidates = await store.read(runs.run_teams, run_id)
        for seq, team_id in candidates:
            if hmac.compare_digest(
                mac.encode(), _mac(secret, _token_message(team_id, run_id)).encode()
            ):
                return Principal(team_id=team_id, run_id=run_id, bucket=f"run:{seq}")
        if candidates and hmac.compare_digest(mac.encode(), _mac(secret, run_id).encode()):
            seq, team_id = candidates[0]  # a token minted before ids were per team
            return Principal(team_id=team_id, run_id=run_id, bucket=f"run:{seq}")
    raise unauthorized("the run token is not valid on this server")


async def principal_for_session(cookie: str, store: Store) -> Principal:
    """The caller a session cookie stands for; 401 when it has expired, was signed out, or its
    key was revoked."""
    found = await store.read(sessions.session_caller, hash_session_token(cookie), time.time())
    if found is None:
        raise unauthorized("the dashboard session has ended (expired or signed out): sign in again")
    key_id, team_id, _ = found
    return Principal(team_id=team_id, run_id=None, bucket=f"key:{key_id}", via_session=True)


def check_run(principal: Principal, run: RunRow | None, run_id: str, write: bool) -> None:
    """404 unless `principal` may see `run`; 403 for a write by another run's token."""
    if run is None or (principal.team_id is not None and run["team_id"] != principal.team_id):
        raise not_found(f"no run {run_id!r}")
    if principal.run_id is not None and principal.run_id != run["id"]:
        if write:
            raise forbidden("this run token may only write to its own run")
        raise not_found(f"no run {run_id!r}")
