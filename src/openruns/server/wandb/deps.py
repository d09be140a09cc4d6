"""
What every W&B route needs: the caller, the entity (team) a call names, and the run.

The SDK authenticates with HTTP Basic `api:<WANDB_API_KEY>` on GraphQL and the file stream
(a Bearer token is taken too). With auth on, the key is an openruns team key: its team is the
W&B entity, and a call naming another entity is refused. With auth off (loopback) any key, or
none, acts for every team, and the entity a call names (else `default`) is the run's team.
Upload URLs carry a signature instead (files.py), as the SDK sends no credentials with them.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from starlette.requests import Request

from ..auth import ANONYMOUS, DEFAULT_TEAM, Principal, acting_team, check_run, principal_for
from ..limits import note_caller
from ..state import ServerState, server_state
from ..store.rows import RunRow

__all__ = ["DEFAULT_ENTITY", "WireCaller", "wandb_caller"]

DEFAULT_ENTITY = DEFAULT_TEAM


@dataclass(frozen=True)
class WireCaller:
    """The caller of one W&B request, with what its calls need."""

    state: ServerState
    request: Request
    principal: Principal

    @property
    def viewer_entity(self) -> str:
        return self.principal.team_id or DEFAULT_ENTITY

    def entity(self, named: str | None) -> str:
        """The team a call naming entity `named` acts in; 403 for another team's entity."""
        return acting_team(
            self.principal, named, noun="entity", hint="set WANDB_ENTITY={team} (or leave it unset)"
        )

    async def run(self, entity: str | None, run_id: str, write: bool) -> RunRow | None:
        """The run `run_id` of the entity, or None when it does not exist (or is not this
        caller's to see: a run token of another run)."""
        team = self.entity(entity)
        # Auth off: ids are unique across teams, and any entity reaches the run.
        run = await self.state.store.get_run(run_id, team if self.state.auth_enabled else None)
        if run is None:
            return None
        check_run(self.principal, run, run_id, write=write)
        return run


async def wandb_caller(request: Request) -> WireCaller:
    state = server_state(request)
    if not state.auth_enabled:
        return WireCaller(state, request, ANONYMOUS)
    principal = await principal_for(api_key(request), state.store.secret, state.store)
    state.limiter.check(principal.bucket)
    note_caller(request, principal.bucket)
    return WireCaller(state, request, principal)


def api_key(request: Request) -> str | None:
    """The key of `Authorization: Basic base64(api:KEY)` (the SDK's), or of a Bearer token."""
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer":
        return value.strip() or None
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    _, _, key = decoded.partition(":")
    return key or None
