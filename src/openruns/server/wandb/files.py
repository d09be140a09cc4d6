"""
The files the W&B SDK uploads (CreateRunFiles, an artifact's entries): signed upload URLs on
this server and the PUT they point at.

    upload_url(request, state, run, "media/table/completions_0_ab12.table.json")
      -> http://host/api/v1/wandb/files/17/media/table/...?expires=...&signature=...

The SDK PUTs a file to the URL it was given with no credentials (as to a cloud bucket), so the
URL carries an HMAC of (run, name, expiry) under a key derived from the server secret: any
replica checks it, nothing is stored per URL. Each file becomes a blob (media.blob_key: the
run's media at their paths, so the dashboard and the media route find them) and a row of
wandb_files; some also mean something for the run:

- config.yaml is the run's config, byte for byte (until it arrives, the config the SDK sent
  in UpsertBucket, as JSON);
- wandb-metadata.json (host, program, git commit, Python, GPU) is shown with the run;
- a table's file (media/table/*.table.json), once the history row naming it is in too, is read
  by tables.episodes_from_table: a table of rollouts becomes episodes of its step, one per row;
  any other table is kept, and shown as a table. A table the SDK also saved in its run_table
  artifact is read from that copy (its image cells name media files, the run file's say
  "Image"); from the run file if the copy has not come when the run ends.
"""

from __future__ import annotations

import hmac
import logging
import re
import time
from typing import Annotated, Any
from urllib.parse import quote

import orjson
from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool

from ...rundir import batch_key
from ...spec import MAX_CONFIG_SOURCE_BYTES
from ..admission import ingest_owner
from ..auth import url_signature
from ..body import read_body
from ..errors import ApiError, bad_request
from ..handlers import JSON
from ..ingest import ingest_records
from ..routes.deps import State
from ..state import ServerState
from ..store import episodes as store_episodes
from ..store import runs as store_runs
from ..store import wandb as store
from ..store.rows import RunRow
from . import media, tables

__all__ = ["UPLOAD_PATH", "check_file_name", "read_tables", "router", "upload_url"]

logger = logging.getLogger("openruns.server.wandb")
router = APIRouter(tags=["wandb"], include_in_schema=False)

UPLOAD_PATH = "/api/v1/wandb/files/"
# An upload URL outlives the slowest upload of a run's files at its end (W&B's are signed for
# a day too).
URL_SECONDS = 24 * 3600
# A run file's name as the SDK writes one: relative, segments of letters, digits, _ - . (none
# of them "." or ".."), e.g. media/images/pic_3_ab12.png, output_rank1.log.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*(/[A-Za-z0-9_][A-Za-z0-9_.\-]*)*")
_MAX_NAME = 512
METADATA_FILE = "wandb-metadata.json"


def check_file_name(name: str) -> str:
    """`name`, or 400 naming the rule (a name is part of a blob key: never trusted as sent)."""
    if (
        len(name) > _MAX_NAME
        or not _NAME.fullmatch(name)
        or any(part in (".", "..") for part in name.split("/"))
    ):
        raise bad_request(
            "invalid_file_name",
            f"file name {name[:80]!r} is not valid: relative segments of letters, digits, "
            f"'_', '-' and '.', at most {_MAX_NAME} characters",
        )
    return name


def upload_url(request: Request, state: ServerState, run: RunRow, name: str) -> str:
    check_file_name(name)
    expires = int(time.time()) + URL_SECONDS
    signature = _signature(state.store.secret, run["seq"], name, expires)
    base = (state.settings.public_url or str(request.base_url)).rstrip("/")
    return f"{base}{UPLOAD_PATH}{run['seq']}/{quote(name)}?expires={expires}&signature={signature}"


def _signature(secret: bytes, run_seq: int, name: str, expires: int) -> str:
    return url_signature(secret, b"openruns wandb upload v1", f"PUT\n{run_seq}\n{name}\n{expires}")


@router.put(UPLOAD_PATH + "{run_seq}/{name:path}")
async def put_file(
    run_seq: int,
    name: str,
    request: Request,
    state: State,
    expires: Annotated[int, Query(ge=0, le=2**62)],
    signature: Annotated[str, Query(max_length=128)],
) -> JSON:
    """A run file the SDK uploads to the URL CreateRunFiles (or CreateArtifactFiles) gave."""
    expected = _signature(state.store.secret, run_seq, name, expires)
    if not hmac.compare_digest(signature.encode(), expected.encode()):
        raise ApiError(403, "invalid_signature", "the upload URL's signature is not valid")
    if time.time() > expires:
        raise ApiError(403, "expired", "the upload URL has expired; ask for the run's files again")
    run = await state.store.read(store_runs.get_run_by_seq, run_seq)
    if run is None:
        raise ApiError(404, "not_found", "the upload URL's run does not exist")
    async with state.gate.admit(ingest_owner(request)) as ticket:
        body = await read_body(request, state.settings.max_body_bytes, ticket)
        key = media.blob_key(run_seq, name)
        await run_in_threadpool(state.blobs.put_atomic, key, body)
    unread = await state.store.write(store.add_file, run_seq, name, key, len(body), time.time())
    if name == store.CONFIG_FILE:
        await _config_file(state, run_seq, body)
    elif name == METADATA_FILE:
        await _metadata_file(state, run_seq, body)
    if unread:
        await read_tables(state, run, unread)
    return JSON({"name": name, "bytes": len(body)})


async def _config_file(state: ServerState, run_seq: int, body: bytes) -> None:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        logger.warning("openruns: run %d: config.yaml is not UTF-8; kept as a file only", run_seq)
        return
    if len(body) > MAX_CONFIG_SOURCE_BYTES:
        logger.warning(
            "openruns: run %d: config.yaml is over %d bytes; kept as a file only",
            run_seq,
            MAX_CONFIG_SOURCE_BYTES,
        )
        return
    await state.store.write(store.set_config_file, run_seq, text, time.time())


async def _metadata_file(state: ServerState, run_seq: int, body: bytes) -> None:
    try:
        metadata = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise bad_request("invalid_metadata", f"{METADATA_FILE} is not JSON") from None
    if isinstance(metadata, dict):
        await state.store.write(store.set_metadata, run_seq, metadata)


async def read_tables(state: ServerState, run: RunRow, unread: list[dict[str, Any]]) -> None:
    """Read each table whose file and history row are both in: its rollouts become episodes
    of its step (tables.episodes_from_table), counted on its media row; another table is
    kept as a table (0 episodes)."""
    for table_row in unread:
        found = None
        for name in (table_row["copy"], table_row["path"]):  # the artifact's copy first
            if name and found is None:
                found = await state.store.read(store.file_of_run, run["seq"], name)
        if found is None:
            continue
        data = await run_in_threadpool(state.blobs.get, found["blob_key"])
        table = tables.parse_table(data)
        episodes = (
            tables.episodes_from_table(table, step=table_row["step"], key=table_row["key"])
            if table is not None
            else None
        )
        read = len(episodes or ())
        if episodes:
            # A grown table logged again (verl, OpenRLHF, SkyRL: wandb#2981's workaround) holds
            # every earlier row again, with the same ids: only the new ones are stored.
            ids = [e["id"] for e in episodes]
            held = await state.store.read(store_episodes.held_ids, run["seq"], "episodes", ids)
            episodes = [e for e in episodes if e["id"] not in held]
        if episodes:
            ndjson = b"".join(orjson.dumps(e) + b"\n" for e in episodes)
            await ingest_records(
                state, run, ndjson, batch_key(ndjson), "episodes", table_row["step"]
            )
        await state.store.write(store.set_episodes, table_row["id"], read)
