"""
The alerts API: rules (CRUD, a team's API key or dashboard session), the delivery log, and the
upload of alerts a run sends (a run token will do).

    POST   /api/v1/alerts/rules                {"name", "condition", "webhook", "project"?}
    GET    /api/v1/alerts/rules
    GET    /api/v1/alerts/rules/{id}
    PATCH  /api/v1/alerts/rules/{id}           {"name"?, "condition"?, "webhook"?, "enabled"?}
    DELETE /api/v1/alerts/rules/{id}
    GET    /api/v1/alerts/deliveries?rule_id=&run_id=&status=&limit=&cursor=
    POST   /api/v1/runs/{id}/alerts            NDJSON (run_alerts.py)
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request, Response

from ..auth import Principal, acting_team
from ..errors import forbidden, not_found
from ..handlers import JSON
from ..routes.deps import Caller, State, decode_cursor, encode_cursor, writable_run
from ..routes.metrics import NDJSON_BODY, UploadKey
from ..state import ServerState
from ..store import alerts
from .rules import RuleBody, RulePatch, new_secret, public_rule
from .run_alerts import upload_run_alerts

__all__ = ["router"]

router = APIRouter(tags=["alerts"])


def _team_caller(caller: Principal) -> Principal:
    if caller.run_id is not None:
        raise forbidden("a run token cannot manage alert rules; use an API key")
    return caller


# A rule's id is a signed 64-bit column: a larger one is a 422 naming it, not an overflow (a
# 500).
MAX_RULE_ID = 2**63 - 1
RuleId = Annotated[int, Path(ge=1, le=MAX_RULE_ID)]


async def _rule_of(state: ServerState, caller: Principal, rule_id: int) -> dict[str, Any]:
    rule = await state.store.read(alerts.get_rule, rule_id, caller.team_id)
    if rule is None:  # another team's rule is not revealed
        raise not_found(f"no alert rule {rule_id}")
    return rule


@router.post("/alerts/rules", status_code=201)
async def create_rule(body: RuleBody, state: State, caller: Caller) -> JSON:
    """Create a rule for the key's team (or one project of it). Its webhook's signing secret
    is in the answer (`webhook.secret`)."""
    _team_caller(caller)
    team_id = acting_team(caller, body.team_id)
    fields = {
        "team_id": team_id,
        "project": body.project,
        "name": body.name,
        "condition": body.condition.model_dump(),
        "url": body.webhook.url,
        "format": body.webhook.format,
        "secret": new_secret(),
        "enabled": body.enabled,
    }
    rule = await state.store.write(alerts.create_rule, fields, time.time())
    return JSON(public_rule(rule), status_code=201)


@router.get("/alerts/rules")
async def list_rules(state: State, caller: Caller) -> JSON:
    """The team's rules, oldest first."""
    _team_caller(caller)
    rules = await state.store.read(alerts.list_rules, caller.team_id)
    return JSON({"items": [public_rule(r) for r in rules]})


@router.get("/alerts/rules/{rule_id}")
async def get_rule(rule_id: RuleId, state: State, caller: Caller) -> JSON:
    _team_caller(caller)
    return JSON(public_rule(await _rule_of(state, caller, rule_id)))


@router.patch("/alerts/rules/{rule_id}")
async def patch_rule(rule_id: RuleId, body: RulePatch, state: State, caller: Caller) -> JSON:
    """Change a rule. A new condition starts over: runs it held for fire again if it holds."""
    _team_caller(caller)
    await _rule_of(state, caller, rule_id)
    changes: dict[str, Any] = {}
    if body.name is not None:
        changes["name"] = body.name
    if body.condition is not None:
        changes["condition"] = body.condition.model_dump()
    if body.webhook is not None:
        changes["url"], changes["format"] = body.webhook.url, body.webhook.format
    if body.enabled is not None:
        changes["enabled"] = body.enabled
    await state.store.write(alerts.update_rule, rule_id, changes)
    return JSON(public_rule(await _rule_of(state, caller, rule_id)))


@router.delete("/alerts/rules/{rule_id}", status_code=204)
async def delete_rule(rule_id: RuleId, state: State, caller: Caller) -> Response:
    """Delete a rule; its deliveries stay in the log (those not sent yet: failed)."""
    _team_caller(caller)
    await _rule_of(state, caller, rule_id)
    await state.store.write(alerts.delete_rule, rule_id, time.time())
    return Response(status_code=204)


@router.get("/alerts/deliveries")
async def list_deliveries(
    state: State,
    caller: Caller,
    rule_id: Annotated[int | None, Query(ge=1, le=MAX_RULE_ID)] = None,
    run_id: Annotated[str | None, Query(max_length=64)] = None,
    status: Literal["pending", "delivered", "failed"] | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
) -> JSON:
    """The delivery log, newest first: each delivery's rule, run, event, status, attempts,
    the receiver's last answer or error, and when it will be tried again."""
    _team_caller(caller)
    after = decode_cursor(cursor, ((int,),))
    rows = await state.store.read(
        alerts.deliveries_page,
        caller.team_id,
        after[0] if after else None,
        limit + 1,
        rule_id,
        status,
        run_id,
    )
    next_cursor = encode_cursor([rows[limit - 1]["id"]]) if len(rows) > limit else None
    return JSON({"items": rows[:limit], "next_cursor": next_cursor})


@router.post("/runs/{run_id}/alerts", openapi_extra=NDJSON_BODY)
async def post_run_alerts(
    run_id: str, request: Request, state: State, caller: Caller, idempotency_key: UploadKey = None
) -> JSON:
    """NDJSON alerts the run sends (the SDK's `run.alert`, its NaN reports), compressed as
    for metrics; stored once per key. Each goes to the webhooks of the rules in the run's
    scope, from the server's delivery task (this call never waits for a webhook)."""
    run = await writable_run(state, caller, run_id)
    return JSON(await upload_run_alerts(state, request, run, idempotency_key))
