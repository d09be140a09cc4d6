"""
Read runs, metrics and episodes back from an openruns server.

    from openruns.api import Client

    client = Client()                       # OPENRUNS_BASE_URL, OPENRUNS_API_KEY
    for run in client.runs(kind="train", tag="baseline"):
        frame = client.metrics_frame(run["id"], keys=["train/loss"])
    best = next(client.episodes(run_id, step=100, sort="-reward"))
    episode = client.episode(run_id, best["id"])

SDK side: imports httpx, orjson and openruns modules only, never the server.
"""

from __future__ import annotations

from ._client import Client

__all__ = ["Client"]
