"""
The GraphQL resolvers of a run's life: who is calling (Viewer), what this server supports
(ServerFeaturesQuery), creating and updating the run (UpsertBucket), resuming it
(RunResumeStatus), its upload URLs (CreateRunFiles), and reading it back (project.run).

A W&B run is an openruns run: its id (`name` in W&B's schema) is the run id, `displayName` the
name, notes, tags and group the run's, `jobType` kept with it (a job type naming `eval` makes an
eval run, any other a train run), the project `runs.project`, the entity the team. A W&B
run's id is unique in its entity (openruns ids are per team), so one id names one run whatever
project a call says.
"""

from __future__ import annotations

import base64
import time
from typing import TYPE_CHECKING, Any

import orjson

from ...identity import check_run_id
from ..errors import ApiError, bad_request
from ..store import wandb as store
from ..store.rows import RunRow
from .deps import WireCaller
from .files import upload_url
from .history import metric_definitions, parse_object, wandb_values

__all__ = ["RESOLVERS", "run_node", "storage_id"]

DEFAULT_WANDB_PROJECT = "uncategorized"  # W&B's project of a run that names none
# Features this server declares: console lines in the structured form (level, time, label).
FEATURES = ("STRUCTURED_CONSOLE_LOGS",)
if TYPE_CHECKING:  # graphql-core is imported with the endpoint's first request (graphql.py)
    from graphql import GraphQLResolveInfo

    Info = GraphQLResolveInfo
# The SDK's telemetry (config `_wandb.t`, "3": the features in use) numbers shared mode 67
# (wandb_telemetry.proto, Feature.shared_mode).
SHARED_MODE_FEATURE = 67


def _caller(info: Info) -> WireCaller:
    caller: WireCaller = info.context
    return caller


def _id(*parts: str) -> str:
    return base64.b64encode(":".join(parts).encode()).decode()


def storage_id(run: RunRow) -> str:
    """The run's GraphQL id (W&B's `Run:v1:<name>:<project>:<entity>`), which StopRun names."""
    return _id("Run", "v1", run["id"], run["project"], run["team_id"])


def viewer(_: Any, info: Info) -> dict[str, Any]:
    entity = _caller(info).viewer_entity
    node = _entity(entity)
    return {
        "id": _id("User", entity),
        "entity": entity,
        "username": entity,
        "email": None,
        "flags": "{}",
        "teams": {"edges": [{"node": node}]},
    }


def server_info(_: Any, info: Info) -> dict[str, Any]:
    return {
        "features": [{"name": name, "isEnabled": True} for name in FEATURES],
        "cliVersionInfo": {},
        "latestLocalVersionInfo": None,
    }


def _entity(name: str) -> dict[str, Any]:
    return {
        "id": _id("Entity", name),
        "name": name,
        "organization": None,
        "xxhashDigestsEnabled": False,
    }


def entity(_: Any, info: Info, name: str | None = None) -> dict[str, Any]:
    return _entity(_caller(info).entity(name))


def organization(_: Any, info: Info, name: str) -> None:
    return None  # no organizations: entities are teams


def project(
    _: Any, info: Info, name: str | None = None, entityName: str | None = None
) -> dict[str, Any]:
    team = _caller(info).entity(entityName)
    project_name = name or DEFAULT_WANDB_PROJECT
    return {
        "id": _id("Project", team, project_name),
        "name": project_name,
        "entityName": team,
        "entity": _entity(team),
    }


async def project_run(
    parent: dict[str, Any], info: Info, name: str, missingOk: bool | None = None
) -> dict[str, Any] | None:
    caller = _caller(info)
    if not name or len(name) > 256:
        return None
    run = await caller.run(parent["entityName"], name, write=False)
    return await run_node(caller, run) if run is not None else None


async def run_node(caller: WireCaller, run: RunRow) -> dict[str, Any]:
    """A run as W&B's schema has it (what RunResumeStatus and QueryRunInfo read)."""
    state = await caller.state.store.read(store.run_state, run["seq"])
    logs = await caller.state.store.read(store.console_line_count, run["seq"])
    own = state or {}
    config = own.get("wandb_config") or _native_config(run)
    tail = own.get("history_tail")
    return {
        "id": storage_id(run),
        "name": run["id"],
        "displayName": run["name"],
        "description": run["description"],
        "notes": run["notes"],
        "tags": run["tags"],
        "group": run["group"],
        "jobType": own.get("job_type"),
        "state": _state(run),
        "stopped": run["stop_requested_at"] is not None,
        "config": orjson.dumps(config).decode(),
        "summaryMetrics": orjson.dumps(run["summary"]).decode(),
        "_wandb": (config.get("_wandb") or {}).get("value") or {},
        "sweepName": None,
        "project": {
            "id": _id("Project", run["team_id"], run["project"]),
            "name": run["project"],
            "entityName": run["team_id"],
            "entity": _entity(run["team_id"]),
        },
        "historyLineCount": own.get("history_lines", 0),
        "eventsLineCount": own.get("events_lines", 0),
        "logLineCount": logs,
        "historyTail": orjson.dumps([tail] if tail else []).decode(),
        "eventsTail": "[]",
    }


def _native_config(run: RunRow) -> dict[str, Any]:
    """A native run's config, as W&B's {key: {"value": v}} (a JSON config's values)."""
    config = run.get("config") or {}
    if config.get("format") != "json":
        return {}
    try:
        values = orjson.loads(config["text"])
    except orjson.JSONDecodeError:
        return {}
    return {k: {"value": v} for k, v in values.items()} if isinstance(values, dict) else {}


def _state(run: RunRow) -> str:
    """W&B's word for the run's state."""
    return {
        "running": "running",
        "completed": "finished",
        "failed": "failed",
        "crashed": "crashed",
        "cancelled": "killed",
    }.get(run["status"], str(run["status"]))


def wandb_config(run: dict[str, Any], info: Info, keys: list[str] | None = None) -> str:
    own: dict[str, Any] = run["_wandb"]
    picked = {k: own[k] for k in keys if k in own} if keys is not None else own
    text: str = orjson.dumps(picked).decode()
    return text


async def upsert_bucket(_: Any, info: Info, input: dict[str, Any]) -> dict[str, Any]:
    """Create the run, or update what this call names (a field left null is unchanged)."""
    caller = _caller(info)
    state = caller.state
    if not caller.principal.can_create:
        raise bad_request("forbidden", "a run token cannot create runs: use a team key")
    team = caller.entity(input.get("entityName"))
    run_id = input.get("name")
    if not isinstance(run_id, str) or not run_id:
        raise bad_request("invalid_run_id", "upsertBucket needs the run's name (its id)")
    try:
        check_run_id(run_id, "the W&B run id")
    except ValueError as exc:
        raise bad_request("invalid_run_id", str(exc)) from exc
    job_type = input.get("jobType")
    fields = {
        "id": run_id,
        "kind": "eval" if job_type and "eval" in job_type.lower() else "train",
        "name": input.get("displayName"),
        "description": input.get("description"),
        "notes": input.get("notes"),
        "tags": input.get("tags"),
        "group": input.get("groupName"),
        "job_type": job_type,
        "project": input.get("modelName") or DEFAULT_WANDB_PROJECT,
    }
    config = _config(input.get("config"))
    # A process starting on the run sends its host and program: a run that ended runs again
    # (resume="allow"/"must", or the same id given twice). Not a shared-mode writer's: one
    # that starts late must not reopen the run its primary finished.
    starting = bool(input.get("host") or input.get("jobProgram"))
    fields["resume"] = starting and not (config is not None and config.shared_mode)
    run, created = await state.store.write(
        store.upsert_run, team, fields, config, time.time(), state.auth_enabled
    )
    return {"bucket": await run_node(caller, run), "inserted": created}


def _config(text: str | None) -> store.ConfigUpdate | None:
    if not text:
        return None
    try:
        raw = parse_object(text)
    except ValueError as exc:
        raise bad_request("invalid_config", f"config is not a JSON object: {exc}") from exc
    values, own = wandb_values(raw)
    exact, globs = metric_definitions(own)
    branch = own.get("branch_point")
    telemetry = own.get("t")
    features = telemetry.get("3") if isinstance(telemetry, dict) else None
    return store.ConfigUpdate(
        raw=raw,
        values=values,
        step_metrics=exact,
        globs=globs,
        branch=branch if isinstance(branch, dict) else None,
        shared_mode=isinstance(features, list) and SHARED_MODE_FEATURE in features,
    )


async def create_run_files(_: Any, info: Info, input: dict[str, Any]) -> dict[str, Any]:
    """Upload URLs for the run's files (signed: the SDK PUTs them without credentials)."""
    caller = _caller(info)
    run = await caller.run(input["entityName"], input["runName"], write=True)
    if run is None:
        raise ApiError(404, "not_found", f"no run {input['runName']!r}")
    files = [
        {"name": name, "uploadUrl": upload_url(caller.request, caller.state, run, name)}
        for name in input["files"]
    ]
    return {"runID": storage_id(run), "uploadHeaders": [], "files": files}


def mark_uploaded(_: Any, info: Info, input: dict[str, Any]) -> dict[str, Any]:
    return {"success": True}  # each PUT is stored as it arrives


async def stop_run(_: Any, info: Info, input: dict[str, Any]) -> dict[str, Any]:
    """`wandb.Api().run(...).stop()`-like: the same stop request as the dashboard's."""
    from ..store.runs import request_stop

    caller = _caller(info)
    try:
        parts = base64.b64decode(input["id"]).decode().split(":")
    except ValueError:
        parts = []
    if len(parts) != 5 or parts[0] != "Run":
        raise bad_request("invalid_id", f"{input['id']!r} is not a run id of this server")
    run = await caller.run(parts[4], parts[2], write=True)
    if run is None:
        raise ApiError(404, "not_found", f"no run {parts[2]!r}")
    return {"success": await caller.state.store.write(request_stop, run["seq"], time.time())}


RESOLVERS: dict[str, dict[str, Any]] = {
    "Query": {
        "viewer": viewer,
        "serverInfo": server_info,
        "model": project,
        "project": project,
        "entity": entity,
        "organization": organization,
    },
    "Project": {"bucket": project_run, "run": project_run},
    "Run": {"wandbConfig": wandb_config},
    "Mutation": {
        "upsertBucket": upsert_bucket,
        "createRunFiles": create_run_files,
        "markRunFilesUploaded": mark_uploaded,
        "stopRun": stop_run,
    },
}
