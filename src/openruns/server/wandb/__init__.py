"""
The W&B wire (issue 19): the routes the unmodified wandb SDK (0.31; its Go core, wandb-core,
makes the calls) uses, mapped onto the native store, so code written for W&B logs into
openruns with `WANDB_BASE_URL` and `WANDB_API_KEY` pointing here.

    graphql.py      POST /graphql: the GraphQL operations of a run's life (schema.graphql)
    resolvers.py    Viewer, ServerFeaturesQuery, UpsertBucket, RunResumeStatus, CreateRunFiles...
    artifacts.py    the artifact operations a logged wandb.Table makes
    filestream.py   POST /files/{entity}/{project}/{run}/file_stream: history, system metrics,
                    summary, console output, the exit code; answers a dashboard stop
    files.py        signed upload URLs and the PUT of run files (config.yaml, metadata, media)
    history.py      the streamed lines read into metric points, console lines, definitions
    reads.py        the W&B side of a run, its media, through the native API
    telemetry.py    the SDK's OpenTelemetry exports to its base URL, accepted and dropped
    links.py        the run URL the SDK prints opens the run page
    media.py        where media files live and what a value says of them (wandbtables)
    tables.py       tables of rollouts as episodes (wandbtables)
    chats.py        rollout cells as chats (wandbtables)
    deps.py         the caller (HTTP Basic api:KEY), its entity, the run

A W&B run is an ordinary openruns run (kind train, or eval for an eval job type) in the
native API, the read client and the dashboard; docs/wandb.md says what is served and what
not.
"""

from __future__ import annotations

from fastapi import FastAPI

from . import files, filestream, graphql, links, reads, telemetry

__all__ = ["include_wandb"]


def include_wandb(app: FastAPI) -> None:
    for router in (graphql.router, filestream.router, files.router, telemetry.router, links.router):
        app.include_router(router)
    app.include_router(reads.router, prefix="/api/v1")
