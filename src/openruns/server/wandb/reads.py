"""
What a W&B-logged run has beyond the native run, read through the native API (issue 19):

    GET /api/v1/runs/{id}/wandb          {entity, project, job_type, metadata, forked_from,
                                         config_values, files}: wandb-metadata.json (host,
                                         program, git commit, Python, GPU) and the rest
    GET /api/v1/runs/{id}/media          {items: [media.media_item(...)]}: the images and
                                         tables of its history, by step then key; a table of
                                         rollouts says how many `episodes` were read from it
    GET /api/v1/runs/{id}/media/{path}   one media file, as media.content_type(path)

Behind the API's auth like every run read; a run the wire did not create answers null on the
first (it has no W&B side) and an empty listing on the second.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from ..errors import not_found
from ..handlers import JSON
from ..routes.deps import Caller, State, readable_run
from ..store import wandb as store
from . import media
from .history import wandb_values

__all__ = ["router"]

router = APIRouter(tags=["wandb"])


@router.get("/runs/{run_id}/wandb")
async def wandb_side(run_id: str, state: State, caller: Caller) -> JSON:
    """The W&B side of a run logged by the W&B SDK: entity, project, job type, the SDK's
    metadata (wandb-metadata.json), a fork's origin, the config's values, its files."""
    run = await readable_run(state, caller, run_id)
    found = await state.store.read(store.run_state, run["seq"])
    if found is None:
        return JSON(None)  # not logged through the W&B SDK: it has no W&B side
    values, _ = wandb_values(found["wandb_config"])
    files = await state.store.read(store.file_names, run["seq"])
    return JSON(
        {
            "entity": found["entity"],
            "project": run["project"],
            "job_type": found["job_type"],
            "metadata": found["metadata"],
            "forked_from": found["forked_from"],
            "config_values": values,
            "files": files,
        }
    )


@router.get("/runs/{run_id}/media")
async def media_listing(run_id: str, state: State, caller: Caller) -> JSON:
    run = await readable_run(state, caller, run_id)
    items: list[dict[str, Any]] = []
    for row in await state.store.read(store.media_items, run["seq"]):
        item = media.media_item(row["key"], row["step"], row["value"])
        if item is None:
            continue
        if row["episodes"]:
            item["episodes"] = row["episodes"]
        copy_named = row["copy"] and row["path"] and item["paths"] == [row["copy"]]
        # A table's artifact copy that never came: its run file is what there is.
        seq = run["seq"]
        if copy_named and await state.store.read(store.file_of_run, seq, row["copy"]) is None:
            item["paths"] = [row["path"]]
        items.append(item)
    return JSON({"items": items})


@router.get("/runs/{run_id}/media/{path:path}")
async def media_file(run_id: str, path: str, state: State, caller: Caller) -> Response:
    run = await readable_run(state, caller, run_id)
    checked = media.check_media_path(path)
    found: dict[str, Any] | None = None
    if checked is not None:  # a table: its artifact's copy when it came (its image cells)
        for name in await state.store.read(store.copies_of, run["seq"], checked) + [checked]:
            if found is None:
                found = await state.store.read(store.file_of_run, run["seq"], name)
    if checked is None or found is None:
        raise not_found(f"run {run_id!r} has no media file {path[:200]!r}")
    data = await run_in_threadpool(state.blobs.get, found["blob_key"])
    return Response(media.servable(checked, data), media_type=media.content_type(checked))
