"""
External training runs on the Prime wire (`RftBackend` and the training sinks of prime-runs):
an external run is an openruns run of kind train.

- POST /rft/external-runs: create the run, for a team allowed to (`--prime-training-teams`).
- POST /rft/metrics `{run_id, metrics}`: metric points at `metrics.step`, `_timestamp` as
  their time (a row without a step is keyed by that time); a replay changes nothing.
- POST /rft/samples/presign, PUT, /confirm: a Parquet object kept per step (samples.py,
  objects.py).
- POST /rft/finalize `{run_id, exit_code}`: close it completed (failed for a non-zero code); a
  repeat is a success.
- PUT /rft/external-runs/{id}/status: close it with that status (cancelled and crashed
  restored from the message); 409 once the run is closed.
"""

from __future__ import annotations

import hashlib
import math
import time
from typing import Annotated, Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field, StringConstraints

from ...identity import new_run_id
from ...records import flatten_metrics
from ..admission import ingest_owner
from ..errors import bad_request, forbidden
from ..handlers import JSON
from ..ingest import MAX_KEY_CHARS
from ..routes.deps import State
from ..state import ServerState
from ..store import prime as prime_sql
from ..store.metrics import MAX_STEP
from ..store.runs import require_running_or_grace
from .deps import (
    PrimeCaller,
    config_document,
    default_name,
    new_run_team,
    prime_run,
    terminal_status,
)
from .objects import PRESIGN_SECONDS, presigned_url
from .samples import confirm_train_samples, new_train_samples_key

__all__ = ["router"]

router = APIRouter(tags=["prime: training runs"])

ShortText = Annotated[str, StringConstraints(max_length=1024)]
RunId = Annotated[str, StringConstraints(min_length=1, max_length=256)]
Step = Annotated[int, Field(ge=0, le=MAX_STEP)]
Count = Annotated[int, Field(ge=0, le=2**62)]


class EnvironmentIn(BaseModel):
    id: Annotated[str, StringConstraints(min_length=1, max_length=256)]
    version_id: ShortText | None = None


class ExternalRunCreate(BaseModel):
    base_model: Annotated[str, StringConstraints(min_length=1, max_length=1024)]
    max_steps: Count = 0
    environments: list[EnvironmentIn] = Field(default_factory=list, max_length=1000)
    team_id: Annotated[str, StringConstraints(min_length=1, max_length=128)]
    name: ShortText | None = None
    batch_size: Count | None = None
    rollouts_per_example: Count | None = None
    seq_len: Count | None = None
    run_config: dict[str, Any] | None = None
    wandb_project: ShortText | None = None
    wandb_entity: ShortText | None = None
    wandb_run_name: ShortText | None = None


class MetricsRow(BaseModel):
    run_id: RunId
    metrics: dict[str, Any]


class Presign(BaseModel):
    run_id: RunId
    step: Step


class Confirm(BaseModel):
    run_id: RunId
    step: Step
    s3_key: Annotated[str, StringConstraints(min_length=1, max_length=512)]


class Finalize(BaseModel):
    run_id: RunId
    exit_code: int = 0


class StatusUpdate(BaseModel):
    status: ShortText
    error_message: str | None = None  # any length: terminal_status keeps the first 100,000


_TRAINING_FIELDS = (
    "max_steps",
    "batch_size",
    "rollouts_per_example",
    "seq_len",
    "wandb_project",
    "wandb_entity",
    "wandb_run_name",
)


@router.post("/rft/external-runs", status_code=201)
async def create_external_run(body: ExternalRunCreate, state: State, caller: PrimeCaller) -> JSON:
    """Register a training run for a team; 403 with the reason for a team that may not."""
    team = new_run_team(state, caller, body.team_id)
    _require_training_team(state, team)
    ids = [env.id for env in body.environments]
    names = await state.store.read(prime_sql.environment_names, team, ids)
    fields = {
        "id": new_run_id(),
        "kind": "train",
        "name": body.name or default_name(body.base_model.rsplit("/", 1)[-1]),
        "model": body.base_model,
        "environments": [
            {"id": e.id, "name": names.get(e.id, e.id)}
            | ({"version_id": e.version_id} if e.version_id else {})
            for e in body.environments
        ],
        "config": config_document(body.run_config),
        "training": {k: v for k in _TRAINING_FIELDS if (v := getattr(body, k)) is not None},
    }
    run = await state.store.write(prime_sql.create_run, team, fields, time.time())
    return JSON({"run": {"id": run["id"], "name": run["name"], "status": "RUNNING"}}, 201)


def _require_training_team(state: ServerState, team: str) -> None:
    allowed = state.settings.prime_training_teams
    if allowed is not None and team not in allowed:
        raise forbidden(
            f"External training runs are not enabled for team {team!r} on this server "
            f"(allowed: {', '.join(sorted(allowed)) or 'none'}); an admin enables them with "
            "`openruns server --prime-training-teams`"
        )


@router.post("/rft/metrics")
async def post_metrics(
    body: MetricsRow, request: Request, state: State, caller: PrimeCaller
) -> JSON:
    """
    One logged row: `metrics.step` is the step (absent: a row keyed by its time, as native rows
    without a step), `_timestamp` the time, every other number (nested mappings as `a/b`) a
    metric value. Merged per (step, key), or (time, key), like native uploads; the exact same
    request again changes nothing.
    """
    run = await prime_run(state, caller, body.run_id)
    require_running_or_grace(run, time.time(), state.settings.finish_grace)
    row = dict(body.metrics)
    step = row.pop("step", None)
    if step is not None and (type(step) is not int or not 0 <= step <= MAX_STEP):
        raise bad_request("invalid_step", f"metrics.step must be an integer >= 0, got {step!r}")
    ts = _number(row.pop("_timestamp", None))
    kept, ignored = flatten_metrics(row)
    values = {}
    for name, value in kept.items():
        if not name or len(name) > MAX_KEY_CHARS:
            raise bad_request(
                "invalid_metrics", f"metric names must have 1 to {MAX_KEY_CHARS} characters"
            )
        number = _number(value)
        if number is None:
            ignored[name] = "out of range"
        else:
            values[name] = number
    key = "prime:sha256:" + hashlib.sha256(await request.body()).hexdigest()
    await state.store.write(
        prime_sql.ingest_metric_row, run["seq"], key, step, values, ts, time.time()
    )
    return JSON({"data": {"status": "success", "ignored": sorted(ignored)}})


def _number(value: Any) -> float | None:
    """A finite float of a JSON number (JSON integers may be too big for one), else None."""
    if type(value) not in (int, float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


@router.post("/rft/samples/presign")
async def presign(body: Presign, request: Request, state: State, caller: PrimeCaller) -> JSON:
    """A URL on this server to PUT one Parquet object of the step to, without credentials."""
    run = await prime_run(state, caller, body.run_id)
    key = new_train_samples_key(run["seq"], body.step)
    url = presigned_url(request, state, key)
    return JSON({"data": {"presignedUrl": url, "s3Key": key, "expiresIn": PRESIGN_SECONDS}})


@router.post("/rft/samples/confirm")
async def confirm(body: Confirm, request: Request, state: State, caller: PrimeCaller) -> JSON:
    """Make an uploaded object part of the run's step; a repeat is a success."""
    run = await prime_run(state, caller, body.run_id)
    rows = await confirm_train_samples(state, run, body.step, body.s3_key, ingest_owner(request))
    return JSON({"data": {"status": "confirmed", "rows": rows}})


@router.post("/rft/finalize")
async def finalize(body: Finalize, state: State, caller: PrimeCaller) -> JSON:
    """Close the run completed (`exit_code` 0) or failed; the same outcome again is a success."""
    run = await prime_run(state, caller, body.run_id)
    if body.exit_code == 0:
        status, error = "completed", None
    else:
        status, error = "failed", f"the training process exited with code {body.exit_code}"
    run = await state.store.prime_close_run(run, status, error, None, repeat_ok=True)
    return JSON({"data": {"status": run["status"]}})


@router.put("/rft/external-runs/{run_id}/status")
async def set_status(run_id: str, body: StatusUpdate, state: State, caller: PrimeCaller) -> JSON:
    """Close the run with this status; 409 once it is closed (the SDK reads it as done)."""
    run = await prime_run(state, caller, run_id)
    status, error = terminal_status(body.status, body.error_message)
    run = await state.store.prime_close_run(run, status, error, None, repeat_ok=False)
    return JSON({"run": {"id": run["id"], "status": run["status"]}})
