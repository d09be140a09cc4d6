"""
The Prime Traces upload (`POST /api/v1/traces`, prime-traces 0.0.10), into the runs' episodes.

The request is multipart: a `metadata` part (`{"schema_version": 1, "context": {...}}`) and a
`traces` part, NDJSON, usually gzip (its part header says so). `Idempotency-Key:
sha256:<hex>` must be the SHA-256 of the uncompressed NDJSON (400 `digest_mismatch` if not).
`X-Prime-Line-Format: episode` makes the lines episodes; without it they are bare traces.

The service reads a record's run from `run.id` inside it (prime-runs stamps every line), so
lines are grouped by run and each group is stored in its run exactly as a native episodes
upload (ingest.ingest_records). Every line must name a run this caller can write to. The answer,
`{"upload_id": <hex>, "status": "committed", ...}`, is a function of the bytes, and a replay of
the same bytes stores nothing and gets it again; the same bytes under the other line format
are 409 `line_format_conflict`.

An upload has one part of each name: the Idempotency-Key is the digest of one batch, so a
second `traces` (or `metadata`) part is 400 `duplicate_part` naming it, never a batch half
dropped or two batches under one key (issue 25).
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass, field
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Header, Request
from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.concurrency import run_in_threadpool

from ..admission import ingest_owner
from ..body import decompress, iter_objects, read_body
from ..errors import ApiError, bad_request, conflict
from ..handlers import JSON
from ..ingest import decode_limits, ingest_records
from ..routes.deps import State
from ..state import ServerState
from ..store import prime as prime_sql
from ..store.rows import RunRow
from ..store.runs import require_running_or_grace
from .deps import PrimeCaller, default_step, prime_run

__all__ = ["Upload", "parse_upload", "router"]

router = APIRouter(tags=["prime: traces"])

_MULTIPART_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "metadata": {"type": "string", "description": '{"schema_version": 1}'},
                        "traces": {"type": "string", "format": "binary"},
                    },
                    "required": ["traces"],
                }
            }
        },
    }
}
_LINE_FORMATS = {"episode": "episodes", "trace": "traces"}
# The parser logs a warning for each malformed body before raising; the 400 already says it.
logging.getLogger("python_multipart.multipart").setLevel(logging.ERROR)


@router.post("/traces", status_code=201, openapi_extra=_MULTIPART_BODY)
async def upload_traces(
    request: Request,
    state: State,
    caller: PrimeCaller,
    idempotency_key: Annotated[str | None, Header(max_length=256)] = None,
    x_prime_line_format: Annotated[str | None, Header(max_length=32)] = None,
) -> JSON:
    """One batch of traces or episodes, stored in the runs their lines name."""
    line_format = (x_prime_line_format or "trace").strip().lower()
    if line_format not in _LINE_FORMATS:
        raise bad_request(
            "invalid_line_format",
            f"X-Prime-Line-Format must be 'episode' (or absent for traces), got {line_format!r}",
        )
    settings = state.settings
    async with state.gate.admit(ingest_owner(request)) as ticket:
        body = await read_body(request, settings.max_body_bytes, ticket)
        upload = await run_in_threadpool(parse_upload, body, request.headers.get("content-type"))
        data = await run_in_threadpool(
            decompress, upload.traces, upload.encoding, decode_limits(settings)
        )
        digest = await run_in_threadpool(_sha256, data)
        if idempotency_key is not None and idempotency_key.strip().lower() != f"sha256:{digest}":
            raise bad_request(
                "digest_mismatch",
                f"Idempotency-Key must be sha256:<hex of the uncompressed traces part>; "
                f"the part's digest is sha256:{digest}",
            )
        groups = await run_in_threadpool(_group_by_run, data)
        # Every run first: a batch naming a run the caller may not write stores nothing.
        runs = [await prime_run(state, caller, run_id) for run_id in groups]
        for run, (part, _) in zip(runs, groups.values(), strict=True):
            await _store(state, run, part, data, digest, line_format)
    receipt = {
        "upload_id": digest,
        "status": "committed",
        "line_format": line_format,
        "lines": sum(lines for _, lines in groups.values()),
        "runs": sorted(groups),
    }
    return JSON(receipt, 201)


async def _store(
    state: ServerState,
    run: RunRow,
    part: bytes,
    data: bytes,
    digest: str,
    line_format: str,
) -> None:
    """One run's lines of the batch: stored once, whatever the number of replays."""
    key = f"sha256:{digest}"
    prior = await state.store.read(prime_sql.upload_receipt, run["seq"], key)
    if prior is not None:
        if prior.get("line_format") != line_format:
            raise conflict(
                "line_format_conflict",
                f"these bytes were uploaded before as {prior.get('line_format')!r} lines",
            )
        return
    require_running_or_grace(run, time.time(), state.settings.finish_grace)
    part_key = key if part is data else f"sha256:{await run_in_threadpool(_sha256, part)}"
    await ingest_records(state, run, part, part_key, _LINE_FORMATS[line_format], default_step(run))
    await state.store.write(
        prime_sql.put_upload_receipt, run["seq"], key, {"line_format": line_format}, time.time()
    )


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _group_by_run(data: bytes) -> dict[str, tuple[bytes, int]]:
    """{run id: (its lines as NDJSON, how many)}; the whole body when one run has them all."""
    spans: dict[str, list[tuple[int, int]]] = {}
    for lineno, offset, length, record in iter_objects(data):
        run = record.get("run")
        run_id = run.get("id") if isinstance(run, dict) else None
        if not isinstance(run_id, str) or not run_id:
            raise bad_request(
                "invalid_trace",
                f"line {lineno}: the record has no run.id; openruns keeps every trace in a run "
                "(prime-runs stamps run.id on each line)",
            )
        spans.setdefault(run_id, []).append((offset, length))
    if len(spans) == 1:
        ((run_id, lines),) = spans.items()
        return {run_id: (data, len(lines))}
    return {
        run_id: (b"".join(data[o : o + n] + b"\n" for o, n in lines), len(lines))
        for run_id, lines in spans.items()
    }


@dataclass
class Upload:
    metadata: dict[str, Any]
    traces: bytes
    encoding: str | None


@dataclass
class _Part:
    headers: dict[bytes, bytes] = field(default_factory=dict)
    data: list[bytes] = field(default_factory=list)


def parse_upload(body: bytes, content_type: str | None) -> Upload:
    """The metadata and the (still encoded) traces part of a multipart upload; 400 if not one."""
    kind, params = parse_options_header(content_type or "")
    boundary = params.get(b"boundary")
    if kind != b"multipart/form-data" or not boundary:
        raise bad_request(
            "invalid_multipart", "the body must be multipart/form-data with a boundary"
        )
    parts: list[_Part] = []
    name = bytearray()
    value = bytearray()

    def header_end() -> None:
        parts[-1].headers[bytes(name).strip().lower()] = bytes(value).strip()
        name.clear()
        value.clear()

    callbacks: Any = {
        "on_part_begin": lambda: parts.append(_Part()),
        "on_part_data": lambda d, s, e: parts[-1].data.append(bytes(d[s:e])),
        "on_header_field": lambda d, s, e: name.extend(d[s:e]),
        "on_header_value": lambda d, s, e: value.extend(d[s:e]),
        "on_header_end": header_end,
    }
    try:
        parser = MultipartParser(boundary, callbacks)
        parser.write(body)
        parser.finalize()
    except (MultipartParseError, ValueError) as exc:
        raise bad_request("invalid_multipart", f"the multipart body is malformed: {exc}") from exc
    by_name: dict[str, _Part] = {}
    for part in parts:
        name_of = _part_name(part)
        if name_of in by_name and name_of in ("traces", "metadata"):
            raise bad_request(
                "duplicate_part",
                f"the upload has more than one `{name_of}` part; send one batch per request "
                "(its Idempotency-Key is the digest of that one part)",
            )
        by_name[name_of] = part
    traces = by_name.get("traces")
    if traces is None:
        raise bad_request("invalid_multipart", "the upload has no `traces` part")
    return Upload(
        metadata=_metadata(by_name.get("metadata")),
        traces=b"".join(traces.data),
        encoding=traces.headers.get(b"content-encoding", b"").decode("latin-1") or None,
    )


def _part_name(part: _Part) -> str:
    _, params = parse_options_header(part.headers.get(b"content-disposition", b""))
    return params.get(b"name", b"").decode("latin-1")


def _metadata(part: _Part | None) -> dict[str, Any]:
    if part is None:
        return {}
    try:
        metadata = orjson.loads(b"".join(part.data))
    except orjson.JSONDecodeError as exc:
        raise bad_request("invalid_metadata", f"the metadata part is not JSON: {exc}") from exc
    if not isinstance(metadata, dict):
        raise bad_request("invalid_metadata", "the metadata part must be a JSON object")
    if metadata.get("schema_version", 1) != 1:
        raise ApiError(
            400,
            "unsupported_schema_version",
            f"schema_version {metadata.get('schema_version')!r} is not supported (only 1)",
        )
    return metadata
