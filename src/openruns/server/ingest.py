"""
Bulk uploads: metrics rows and episode segments, from request body to committed receipt.

Every upload follows the same steps: admit (503 when the server is full, 429 when its caller
has its share of the slots), read the body (413, 408), measure what it decodes to (its bounds
and SHA-256, without holding it: 413 for a bomb), answer a known Idempotency-Key with its first
receipt (422 when the key came with another body), check and parse (400 naming what is wrong),
then store. A request without an Idempotency-Key is keyed by the SHA-256 of its decompressed
body, so every upload is safe to replay.

- Metrics: the body is decompressed (415, 413) and its rows parsed and merged.
- Episodes from the SDK (`Content-Type: application/vnd.openruns.batch+zstd`): a batch in the
  run-directory format, whose frames and index rows are checked and stored as sent
  (`segments.check_batch`), never decompressed or re-encoded.
- Episodes as NDJSON from any other client (curl, the Prime-compatible routes):
  `ingest_records`, the one NDJSON path, parses and indexes every record and compresses the
  segment here.

Episodes: the segment blob is fsynced and renamed into place before the index rows and the
receipt commit in one transaction, so a 2xx means both are durable, and a crash in between
leaves only an unreferenced blob, never an index row pointing at nothing.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from ..batches import BATCH_CONTENT_TYPE
from .admission import Ticket, ingest_owner
from .body import DecodeLimits, decode, read_body, survey
from .config import ServerSettings
from .errors import bad_request
from .metric_rows import MAX_KEY_CHARS, upload_batches, whole_chunks
from .segments import Segment, blob_key_for, build_segment, check_batch
from .state import ServerState
from .store.receipts import get_receipt
from .store.rows import RunRow
from .store.runs import require_running_or_grace

__all__ = [
    "MAX_KEY_CHARS",
    "Upload",
    "decode_limits",
    "ingest_records",
    "receive",
    "upload_episodes",
    "upload_metrics",
]


async def upload_metrics(
    state: ServerState, request: Request, run: RunRow, key: str | None
) -> dict[str, Any]:
    """A metrics upload: decoded, measured and parsed by a worker process when its size suits
    one (parse_workers.py), else surveyed and streamed here: decoded, parsed and written a
    chunk of `metric_chunk_points` points at a time, all in the one transaction that stores
    its receipt (store.ingest_metrics), so peak memory follows the chunk, not the upload. A
    replay's receipt is found in that transaction, or, on the streamed path, before it."""
    require_running_or_grace(run, time.time(), state.settings.finish_grace)
    async with state.gate.admit(ingest_owner(request)) as ticket:
        body = await read_body(request, state.settings.max_body_bytes, ticket)
        encoding = request.headers.get("content-encoding")
        parsed = None
        if state.parsers.takes(len(body)):
            parsed = await state.parsers.parse(body, encoding, decode_limits(state.settings))
        if parsed is not None:
            measured, batches = parsed
            ticket.hold(measured.size)
            key = key if key is not None else f"sha256:{measured.digest}"
            return await state.store.ingest_metrics(run["seq"], key, batches, measured.digest)
        upload = await _surveyed(state, run, "metrics", key, ticket, body, encoding, False)
        if upload.prior is not None:
            return upload.prior
        points = state.settings.metric_chunk_points
        chunks = whole_chunks(upload_batches(body, encoding, points), points)
        return await state.store.ingest_metrics(run["seq"], upload.key, chunks, upload.digest)


async def upload_episodes(
    state: ServerState, request: Request, run: RunRow, key: str | None, stream: str
) -> dict[str, Any]:
    """An episodes or traces upload: the SDK's batch, or NDJSON (see the module docstring)."""
    require_running_or_grace(run, time.time(), state.settings.finish_grace)
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    async with state.gate.admit(ingest_owner(request)) as ticket:
        if content_type == BATCH_CONTENT_TYPE:
            return await _upload_batch(state, request, run, key, stream, ticket)
        upload = await receive(state, request, run, stream, key, ticket)
        if upload.prior is not None:
            return upload.prior
        return await ingest_records(
            state, run, upload.data, upload.key, stream, None, upload.digest
        )


async def _upload_batch(
    state: ServerState,
    request: Request,
    run: RunRow,
    key: str | None,
    stream: str,
    ticket: Ticket,
) -> dict[str, Any]:
    settings = state.settings
    body = await read_body(request, settings.max_body_bytes, ticket)
    # The SDK sends a batch as the bytes it stored: a replay is the same bytes.
    digest = await run_in_threadpool(_sha256, body)
    if key is not None:
        prior = await state.store.read(get_receipt, run["seq"], stream, key, digest)
        if prior is not None:
            return prior
    header, segment = await run_in_threadpool(
        check_batch,
        body,
        run["kind"],
        settings.max_decompressed_bytes,
        settings.max_record_bytes,
    )
    if key is None:
        key = str(header.get("key") or "")
        if not key or len(key) > MAX_KEY_CHARS:
            raise bad_request("invalid_batch", "the batch header has no usable key")
        prior = await state.store.read(get_receipt, run["seq"], stream, key, digest)
        if prior is not None:
            return prior
    return await _commit(state, run, key, stream, segment, digest)


async def _commit(
    state: ServerState,
    run: RunRow,
    key: str,
    stream: str,
    segment: Segment,
    digest: str | None,
) -> dict[str, Any]:
    if not segment.rows:
        return {"status": "committed", "records": 0, "receipt": key}
    blob_key = blob_key_for(run["seq"], stream)
    await run_in_threadpool(state.blobs.put_atomic, blob_key, segment.blob)
    return await state.store.commit_segment(
        run["seq"], key, stream, blob_key, len(segment.blob), segment.rows, digest
    )


@dataclass
class Upload:
    """A received NDJSON upload: its body (empty for a replay; decoded unless it was received
    with `decoded=False`: then as sent, in `encoding`), its key, the SHA-256 and the size of
    the decoded body, and the earlier receipt of that key, if it is a replay."""

    data: bytes
    key: str
    digest: str
    prior: dict[str, Any] | None
    encoding: str | None = None
    size: int = 0


def decode_limits(settings: ServerSettings) -> DecodeLimits:
    return DecodeLimits(
        settings.max_decompressed_bytes, settings.max_upload_lines, settings.max_record_bytes
    )


async def receive(
    state: ServerState, request: Request, run: RunRow, kind: str, key: str | None, ticket: Ticket
) -> Upload:
    """Read and decode an NDJSON upload (see _surveyed)."""
    body = await read_body(request, state.settings.max_body_bytes, ticket)
    encoding = request.headers.get("content-encoding")
    return await _surveyed(state, run, kind, key, ticket, body, encoding, True)


async def _surveyed(
    state: ServerState,
    run: RunRow,
    kind: str,
    key: str | None,
    ticket: Ticket,
    body: bytes,
    encoding: str | None,
    decoded: bool,
) -> Upload:
    """
    An upload's body surveyed (body.survey: its bounds and its digest, with a bounded window
    of memory), so a bomb or a replay is answered before anything is decoded into memory; a
    body within bounds counts its decoded bytes against the in-flight budget, then is decoded
    (unless `decoded` is False: the caller decodes it as a stream). A known key with another
    body is 422.
    """
    measured = await run_in_threadpool(survey, body, encoding, decode_limits(state.settings))
    key = key if key is not None else f"sha256:{measured.digest}"
    prior = await state.store.read(get_receipt, run["seq"], kind, key, measured.digest)
    if prior is not None:
        return Upload(b"", key, measured.digest, prior)
    ticket.hold(measured.size)
    if not decoded:
        return Upload(body, key, measured.digest, None, encoding, measured.size)
    data = await run_in_threadpool(decode, body, encoding, measured.size)
    return Upload(data, key, measured.digest, None, None, measured.size)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def ingest_records(
    state: ServerState,
    run: RunRow,
    data: bytes,
    key: str,
    stream: str,
    default_step: int | None = None,
    digest: str | None = None,
) -> dict[str, Any]:
    """
    The NDJSON path: store decompressed NDJSON records of any client (curl; the Prime wire: a
    Prime Traces batch, the episodes inside eval sample rows or training Parquet) as one
    segment of `stream`, parsed, indexed and framed here, with Idempotency-Key `key` (callers
    without one use `rundir.batch_key(data)`): its index rows and the receipt; a repeat of `key`
    stores nothing. Records that say no step are indexed at `default_step` (the records
    themselves are kept as sent). 400 names a bad line; `digest` (the SHA-256 of `data`, when
    the key is the client's) refuses the key reused with another body. The caller has admitted
    the request and checked the run.
    """
    prior = await state.store.read(get_receipt, run["seq"], stream, key, digest)
    if prior is not None:
        return prior
    segment = await run_in_threadpool(build_segment, data, run["kind"])
    if default_step is not None:
        for row in segment.rows:
            if row["step"] is None:
                row["step"] = default_step
    return await _commit(state, run, key, stream, segment, digest)
