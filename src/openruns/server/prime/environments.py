"""
Environment resolution, the two hub calls prime-runs makes before creating an eval run.

openruns has no environment hub: an environment is a name a team's runs share, and its id is
handed out on first use. So `resolve` (by name, the platform's get-or-create) and `@latest`
(by `owner/name`, which on the platform needs a published environment) both get-or-create, and
an eval naming an environment never fails to start for want of a `prime env push`.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Path
from pydantic import BaseModel, StringConstraints

from ..handlers import JSON
from ..routes.deps import State
from ..store import prime as prime_sql
from .deps import PrimeCaller, new_run_team

__all__ = ["router"]

router = APIRouter(tags=["prime: environments"])

Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=256)]


class ResolveBody(BaseModel):
    name: Name
    team_id: Annotated[str, StringConstraints(max_length=128)] | None = None


@router.post("/environmentshub/resolve")
async def resolve(body: ResolveBody, state: State, caller: PrimeCaller) -> JSON:
    """The id of the team's environment `name`, created on first use: `{"data": {"id"}}`."""
    team = new_run_team(state, caller, body.team_id)
    env = await state.store.write(prime_sql.resolve_environment, team, team, body.name, time.time())
    return JSON({"data": _public(env)})


@router.get("/environmentshub/{owner}/{name}/@latest")
async def latest(
    owner: Annotated[str, Path(min_length=1, max_length=256)],
    name: Annotated[str, Path(min_length=1, max_length=256)],
    state: State,
    caller: PrimeCaller,
) -> JSON:
    """The environment `owner/name` (created on first use), with no version of its own."""
    team = new_run_team(state, caller, None)
    env = await state.store.write(prime_sql.resolve_environment, team, owner, name, time.time())
    return JSON({"data": _public(env)})


def _public(env: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": env["id"],
        "name": env["name"],
        "owner": env["owner"],
        "slug": f"{env['owner']}/{env['name']}",
        "version_id": None,
    }
