"""
The platform's legacy sample tables, kept: eval sample rows (`POST /evaluations/{id}/samples`)
and training-samples Parquet objects (presign, PUT, confirm). prime-runs only writes them when a
run opts out of Prime Traces.

Each is kept as sent, one blob per request or object (additive per step, as the platform
keeps them), listed in `prime_objects` and exportable (exports.py). The episode each row
carries (`info.native_wrapper`, the whole `episode.to_record()`) also joins the run's episodes,
stamped with the run like a traced one, so an opted-out run reads like any other run. The cost
is that an opted-out episode is stored twice, once inside its row and once as an episode.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from collections.abc import Iterable
from typing import Any

import orjson
import zstandard
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from ...records import stamp_run
from ..admission import ingest_owner
from ..body import DecodeLimits, decompress, read_body
from ..errors import bad_request
from ..ingest import decode_limits, ingest_records
from ..state import ServerState
from ..store import prime as prime_sql
from ..store.rows import RunRow
from ..store.runs import require_running_or_grace
from .deps import default_step
from .parquet import info_texts

__all__ = [
    "confirm_train_samples",
    "is_train_samples_key",
    "new_train_samples_key",
    "store_eval_samples",
    "train_samples_run",
]

_TRAIN_KEY = re.compile(r"runs/(\d+)/prime/train-samples/(\d+)/[0-9a-f]{24}\.parquet")


async def store_eval_samples(state: ServerState, request: Request, run: RunRow) -> int:
    """Keep one samples request and store its episodes; the number of rows. A repeat of the
    same bytes stores nothing."""
    settings = state.settings
    require_running_or_grace(run, time.time(), settings.finish_grace)
    async with state.gate.admit(ingest_owner(request)) as ticket:
        body = await read_body(request, settings.max_body_bytes, ticket)
        data = await run_in_threadpool(
            decompress,
            body,
            request.headers.get("content-encoding"),
            # One JSON document, not NDJSON: its length is bounded by the body's alone.
            DecodeLimits(
                settings.max_decompressed_bytes,
                settings.max_upload_lines,
                settings.max_decompressed_bytes,
            ),
        )
        key = f"samples:sha256:{hashlib.sha256(data).hexdigest()}"
        prior = await state.store.read(prime_sql.upload_receipt, run["seq"], key)
        if prior is not None:
            return int(prior["samples"])
        rows, blob, episodes = await run_in_threadpool(_split_rows, data, run)
        blob_key = f"runs/{run['seq']}/prime/eval-samples/{secrets.token_hex(12)}.ndjson.zst"
        await run_in_threadpool(state.blobs.put_atomic, blob_key, blob)
        await _store_episodes(state, run, episodes)
        await state.store.write(
            prime_sql.add_object,
            run["seq"],
            "eval_samples",
            None,
            blob_key,
            len(blob),
            rows,
            (key, {"samples": rows}),
            time.time(),
        )
        return rows


def _split_rows(data: bytes, run: RunRow) -> tuple[int, bytes, bytes]:
    """(rows, the rows as zstd NDJSON, the NDJSON of their stamped episodes)."""
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise bad_request("invalid_json", f"the body is not valid JSON: {exc}") from exc
    samples = document.get("samples") if isinstance(document, dict) else None
    if not isinstance(samples, list):
        raise bad_request("invalid_samples", 'the body must be {"samples": [row, ...]}')
    lines = []
    for i, row in enumerate(samples):
        if not isinstance(row, dict):
            raise bad_request("invalid_samples", f"samples[{i}] must be an object")
        lines.append(orjson.dumps(row))
    blob = zstandard.ZstdCompressor(level=3).compress(b"".join(line + b"\n" for line in lines))
    return len(lines), blob, _episode_lines((row.get("info") for row in samples), run)


def new_train_samples_key(run_seq: int, step: int) -> str:
    """A fresh blob key for one Parquet object of a run's step (the presign's `s3Key`)."""
    return f"runs/{run_seq}/prime/train-samples/{step}/{secrets.token_hex(12)}.parquet"


def is_train_samples_key(
    blob_key: str, run_seq: int | None = None, step: int | None = None
) -> bool:
    """Whether `blob_key` has the shape new_train_samples_key gives (for this run and step)."""
    match = _TRAIN_KEY.fullmatch(blob_key)
    if match is None:
        return False
    return (run_seq is None or int(match[1]) == run_seq) and (step is None or int(match[2]) == step)


def train_samples_run(blob_key: str) -> int:
    """The run (seq) a training-samples key was presigned for; ValueError if it is not one."""
    match = _TRAIN_KEY.fullmatch(blob_key)
    if match is None:
        raise ValueError(f"{blob_key!r} is not a training-samples key")
    return int(match[1])


async def confirm_train_samples(
    state: ServerState, run: RunRow, step: int, blob_key: str, caller: str
) -> int:
    """Register a Parquet object PUT to its presigned URL and store its episodes; its rows.
    `caller`: whose upload slot it takes (admission.ingest_owner)."""
    if not is_train_samples_key(blob_key, run["seq"], step):
        raise bad_request(
            "invalid_s3_key",
            f"s3_key {blob_key!r} is not a key this server presigned for this run and step",
        )
    require_running_or_grace(run, time.time(), state.settings.finish_grace)
    async with state.gate.admit(caller) as ticket:
        ticket.body_read()  # no body to wait for: it works from the start
        if not await run_in_threadpool(state.blobs.exists, blob_key):
            raise bad_request(
                "object_missing",
                f"nothing was uploaded under s3_key {blob_key!r}: PUT the Parquet object to "
                "the presigned URL first",
            )
        data = await run_in_threadpool(state.blobs.get, blob_key)
        rows, episodes = await run_in_threadpool(
            _parquet_episodes, data, run, decode_limits(state.settings)
        )
        await _store_episodes(state, run, episodes)
        await state.store.write(
            prime_sql.add_object,
            run["seq"],
            "train_samples",
            step,
            blob_key,
            len(data),
            rows,
            None,
            time.time(),
        )
        return rows


def _parquet_episodes(data: bytes, run: RunRow, limits: DecodeLimits) -> tuple[int, bytes]:
    """(rows, the NDJSON of the stamped episodes inside the rows' `info` column), decoded
    within `limits` (parquet.info_texts: 413 past them)."""
    rows, texts = info_texts(data, limits)
    infos = []
    for text in texts:
        try:
            infos.append(orjson.loads(text) if text is not None else None)
        except orjson.JSONDecodeError:
            infos.append(None)
    return rows, _episode_lines(infos, run)


def _episode_lines(infos: Iterable[Any], run: RunRow) -> bytes:
    """The NDJSON of the episodes in rows' `info.native_wrapper`, stamped with the run as
    Prime Traces would have stamped them (the SDK puts them there unstamped)."""
    out = []
    for info in infos:
        episode = info.get("native_wrapper") if isinstance(info, dict) else None
        if isinstance(episode, dict):
            out.append(orjson.dumps(stamp_run(episode, run["id"], run["kind"])) + b"\n")
    return b"".join(out)


async def _store_episodes(state: ServerState, run: RunRow, lines: bytes) -> None:
    if lines:
        key = f"sha256:{hashlib.sha256(lines).hexdigest()}"
        await ingest_records(state, run, lines, key, "episodes", default_step(run))
