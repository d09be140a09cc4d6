"""
`POST /files/{entity}/{project}/{run}/file_stream`: what a W&B run streams while it runs.

    {"files": {"wandb-history.jsonl": {"offset": 3, "content": ["{\\"loss\\": 1, ...}"]},
               "wandb-events.jsonl": {...}, "wandb-summary.json": {...}, "output.log": {...}},
     "uploaded": [...], "complete": true, "exitcode": 0}
      -> {"stopped": false}

- wandb-history.jsonl: metric rows at their `_step`, with `_timestamp` (history.py); media
  values (tables, images) are kept by step and key, their files arrive as uploads (files.py);
- wandb-events.jsonl: system metrics, rows without a step under `system/`;
- wandb-summary.json: the whole summary of the writer, merged into the run's;
- output.log: console lines by line number (store/wandb.py keeps the line still being
  rewritten open);
- `complete` with `exitcode`: the run closes (0 completed, else failed with the last lines of
  its output; cancelled when a stop was asked for). A run that stops streaming is crashed by
  the server's sweeper: every request, the SDK's heartbeats (`{}`) included, is a heartbeat.

The answer's `stopped` is how a stop asked for on the dashboard reaches the SDK, which then
stops its script. Lines are merged by step and key (history) or time (system rows), so a
replay of a request the SDK saw fail changes nothing; a shared-mode run's writers each number
their lines from 0, which is why offsets are not used to drop lines.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from ..admission import ingest_owner
from ..body import read_body
from ..errors import ApiError, bad_request
from ..handlers import JSON
from ..store import wandb as store
from ..store.metrics import MetricPoints
from . import media
from .deps import wandb_caller
from .files import read_tables
from .history import console_line, history_row, parse_object, system_row

__all__ = ["parse_stream", "router"]

router = APIRouter(tags=["wandb"], include_in_schema=False)

HISTORY = "wandb-history.jsonl"
EVENTS = "wandb-events.jsonl"
SUMMARY = "wandb-summary.json"
CONSOLE = "output.log"


@router.post("/files/{entity}/{project}/{run_id}/file_stream")
async def file_stream(entity: str, project: str, run_id: str, request: Request) -> JSON:
    caller = await wandb_caller(request)
    state = caller.state
    run = await caller.run(entity, run_id, write=True)
    if run is None:
        raise ApiError(404, "not_found", f"no run {run_id!r} in entity {entity!r}")
    async with state.gate.admit(ingest_owner(request)) as ticket:
        body = await read_body(request, state.settings.max_body_bytes, ticket)
        chunk = await run_in_threadpool(parse_stream, body, time.time())
        answer = await state.store.write(
            store.ingest_stream, run["seq"], chunk, time.time(), state.settings.max_log_bytes
        )
    if answer["tables"]:
        await read_tables(state, run, answer["tables"])
    return JSON({"stopped": answer["stopped"]})


def parse_stream(body: bytes, now: float) -> store.StreamUpdate:
    """One request's body, read; 400 names what is not as the SDK sends it."""
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise bad_request("invalid_json", f"the file stream body is not JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise bad_request("invalid_file_stream", "the file stream body must be a JSON object")
    files = payload.get("files") or {}
    if not isinstance(files, dict):
        raise bad_request("invalid_file_stream", "files must be an object of file name: lines")
    chunk = store.StreamUpdate(points=MetricPoints())
    for name, part in files.items():
        offset, lines = _part(name, part)
        if name == HISTORY:
            _history(chunk, lines)
            chunk.history_end = offset + len(lines)
        elif name == EVENTS:
            _events(chunk, lines)
            chunk.events_end = offset + len(lines)
        elif name == SUMMARY and lines:
            chunk.summary = _summary(lines[-1])
        elif name == CONSOLE or (name.startswith("output") and name.endswith(".log")):
            chunk.console_offset = offset
            chunk.console = [console_line(line, now) for line in lines]
    chunk.complete = payload.get("complete") is True
    exitcode = payload.get("exitcode")
    chunk.exitcode = exitcode if isinstance(exitcode, int) else None
    return chunk


def _part(name: str, part: Any) -> tuple[int, list[str]]:
    if not isinstance(part, dict):
        raise bad_request("invalid_file_stream", f"files[{name!r}] must be {{offset, content}}")
    offset = part.get("offset", 0)
    content = part.get("content") or []
    if not isinstance(offset, int) or offset < 0:
        raise bad_request("invalid_file_stream", f"files[{name!r}].offset must be a line number")
    if not isinstance(content, list) or not all(isinstance(line, str) for line in content):
        raise bad_request("invalid_file_stream", f"files[{name!r}].content must be lines")
    return offset, content


def _history(chunk: store.StreamUpdate, lines: list[str]) -> None:
    for i, line in enumerate(lines):
        try:
            row = history_row(line)
        except ValueError as exc:
            raise bad_request("invalid_history", f"history line {i + 1}: {exc}") from exc
        if row.step is None:
            continue  # the SDK numbers every row; one without a step is not a row of it
        for key, value in row.values.items():
            chunk.points[(key, row.step)] = (value, row.ts)
        for key, item in row.media.items():
            is_table = item.get("_type") in media.TABLE_TYPES
            table = media.check_media_path(item.get("path")) if is_table else None
            # Its copy in the run_table artifact (media.table_source), read first when it came.
            source = media.table_source(item) if table else None
            copy = source if source != table else None
            chunk.media.append((row.step, key, item, table, copy))
        chunk.history_tail = line


def _events(chunk: store.StreamUpdate, lines: list[str]) -> None:
    for i, line in enumerate(lines):
        try:
            ts, values = system_row(line)
        except ValueError as exc:
            raise bad_request("invalid_events", f"events line {i + 1}: {exc}") from exc
        if ts is None:
            continue
        for key, value in values.items():
            chunk.points.by_time[(key, ts)] = value


def _summary(line: str) -> dict[str, Any]:
    try:
        summary = parse_object(line)
    except ValueError as exc:
        raise bad_request("invalid_summary", f"the summary is not a JSON object: {exc}") from exc
    from ...records import clean_finite

    return {k: v for k, v in clean_finite(summary).items() if k != "_wandb"}
