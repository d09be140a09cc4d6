"""
Eval runs on the Prime wire (`EvalsBackend` of prime-runs): an evaluation is an openruns run of
kind eval.

- POST /evaluations/: create the run (environments by id, `metadata` as its config).
- PUT /evaluations/{id} `{metadata, metrics}`: replace the config, merge the summary, also
  once the run is closed (only status changes are guarded).
- PUT /evaluations/{id} `{status, error_message}`: close it FAILED or CANCELLED (crashed when
  the message says so); 409 once the run is closed.
- POST /evaluations/{id}/finalize `{metrics}`: close it completed with that summary; a repeat
  is a success.
- POST /evaluations/{id}/samples `{samples}`: keep the rows and store their episodes
  (samples.py).
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field, StringConstraints

from ...identity import new_run_id
from ..errors import bad_request
from ..handlers import JSON
from ..routes.deps import State
from ..store import prime as prime_sql
from .deps import (
    PrimeCaller,
    config_document,
    default_name,
    iso_time,
    new_run_team,
    prime_run,
    terminal_status,
    viewer_url,
)
from .samples import store_eval_samples

__all__ = ["router"]

router = APIRouter(tags=["prime: evaluations"])

ShortText = Annotated[str, StringConstraints(max_length=1024)]
LongText = Annotated[str, StringConstraints(max_length=100_000)]
Tag = Annotated[str, StringConstraints(min_length=1, max_length=256)]
EnvId = Annotated[str, StringConstraints(min_length=1, max_length=256)]


class EnvironmentIn(BaseModel):
    id: EnvId
    version_id: ShortText | None = None


class EvaluationCreate(BaseModel):
    name: ShortText | None = None
    environments: list[EnvironmentIn] = Field(default_factory=list, max_length=1000)
    tags: list[Tag] = Field(default_factory=list, max_length=100)
    model_name: ShortText | None = None
    dataset: ShortText | None = None
    framework: ShortText | None = None
    description: LongText | None = None
    metadata: dict[str, Any] | None = None
    team_id: Annotated[str, StringConstraints(max_length=128)] | None = None


class EvaluationUpdate(BaseModel):
    metadata: dict[str, Any] | None = None
    metrics: dict[str, Any] | None = None
    status: ShortText | None = None
    error_message: str | None = None  # any length: terminal_status keeps the first 100,000


class Finalize(BaseModel):
    metrics: dict[str, Any] | None = None


@router.post("/evaluations/", status_code=201)
async def create_evaluation(
    body: EvaluationCreate, request: Request, state: State, caller: PrimeCaller
) -> JSON:
    """Create an eval run; environments are the ids the hub calls handed out (or any id)."""
    team = new_run_team(state, caller, body.team_id)
    ids = [env.id for env in body.environments]
    names = await state.store.read(prime_sql.environment_names, team, ids)
    # The name shown for an id the hub calls did not hand out is the id itself.
    environments = [
        {"id": e.id, "name": names.get(e.id, e.id)}
        | ({"version_id": e.version_id} if e.version_id else {})
        for e in body.environments
    ]
    fields = {
        "id": new_run_id(),
        "kind": "eval",
        "name": body.name or default_name(body.dataset or body.framework or "eval"),
        "model": body.model_name,
        "environments": environments,
        "framework": body.framework,
        "description": body.description,
        "tags": body.tags,
        "config": config_document(body.metadata),
    }
    run = await state.store.write(prime_sql.create_run, team, fields, time.time())
    return JSON(
        {
            "evaluation_id": run["id"],
            "name": run["name"],
            "status": "RUNNING",
            "eval_type": "external",
            "viewer_url": viewer_url(request, state, run["id"]),
            "created_at": iso_time(run["created_at"]),
        },
        201,
    )


@router.put("/evaluations/{evaluation_id}")
async def update_evaluation(
    evaluation_id: str, body: EvaluationUpdate, state: State, caller: PrimeCaller
) -> JSON:
    """
    `{metadata, metrics}` replaces the config and merges the summary, whatever the run's status;
    `{status, error_message}` closes the run FAILED or CANCELLED, 409 once it is closed.
    """
    run = await prime_run(state, caller, evaluation_id)
    if body.metadata is not None or body.metrics is not None:
        config = config_document(body.metadata) if body.metadata else None
        await state.store.write(
            prime_sql.update_run, run["seq"], config, body.metrics or None, time.time()
        )
    if body.status is not None:
        status, error = terminal_status(body.status, body.error_message)
        if status == "completed":
            raise bad_request(
                "invalid_status", "an evaluation is completed by POST .../finalize, not a PUT"
            )
        run = await state.store.prime_close_run(run, status, error, None, repeat_ok=False)
    else:
        run = await state.store.get_run(run["id"], run["team_id"]) or run
    return JSON({"evaluation_id": run["id"], "status": run["status"].upper()})


@router.post("/evaluations/{evaluation_id}/finalize")
async def finalize_evaluation(
    evaluation_id: str, state: State, caller: PrimeCaller, body: Finalize | None = None
) -> JSON:
    """Close the run completed with `metrics` as its summary; a repeat is a success. (The SDK
    sends a body whose JSON would be `{}` as no body at all.)"""
    body = body or Finalize()
    run = await prime_run(state, caller, evaluation_id)
    run = await state.store.prime_close_run(
        run, "completed", None, body.metrics or None, repeat_ok=True
    )
    return JSON({"evaluation_id": run["id"], "status": run["status"].upper()})


@router.post("/evaluations/{evaluation_id}/samples")
async def push_samples(
    evaluation_id: str, request: Request, state: State, caller: PrimeCaller
) -> JSON:
    """
    `{"samples": [row, ...]}` (prime-runs' eval sample rows, ≤ 25 MiB): the rows are kept as
    sent, and the episode inside each (`info.native_wrapper`) joins the run's episodes.
    """
    run = await prime_run(state, caller, evaluation_id)
    pushed = await store_eval_samples(state, request, run)
    return JSON({"evaluation_id": run["id"], "samples_pushed": pushed, "status": "ok"})
