"""
Console output: parse an upload of log lines, store it with its receipt.

One NDJSON line per printed line (or per traceback):

    {"ts": 1790000000.5,          required: when it was printed (epoch seconds)
     "stream": "stderr",          stdout | stderr | traceback | any short name
     "source": "trainer",         the process: "main" (the default), or a launched component
     "line": "loss went up"}      the text, without its newline (a traceback: many lines)

Receipts work as for metrics (an Idempotency-Key, else the SHA-256 of the body), so a replay
stores nothing. The run's output is kept within the server's `max_log_mib` (store/logs.py).
"""

from __future__ import annotations

import re
import time
from typing import Any, TypeGuard

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from ..spec import MAX_LOG_LINE_CHARS
from .admission import ingest_owner
from .body import iter_objects
from .errors import bad_request
from .ingest import receive  # the shared receive step: body, receipt, decompression
from .state import ServerState
from .store.rows import RunRow
from .store.runs import require_running_or_grace

__all__ = ["MAX_LINE_CHARS", "STREAM_PATTERN", "parse_logs", "upload_logs"]

MAX_LINE_CHARS = MAX_LOG_LINE_CHARS  # written once, in the SDK (spec.py)
MAX_SOURCE_CHARS = 128
STREAM_PATTERN = r"^[a-z][a-z0-9_.-]{0,31}$"
_STREAM = re.compile(STREAM_PATTERN)


async def upload_logs(
    state: ServerState, request: Request, run: RunRow, key: str | None
) -> dict[str, Any]:
    require_running_or_grace(run, time.time(), state.settings.finish_grace)
    async with state.gate.admit(ingest_owner(request)) as ticket:
        upload = await receive(state, request, run, "logs", key, ticket)
        if upload.prior is not None:
            return upload.prior
        rows = await run_in_threadpool(parse_logs, upload.data)
        return await state.store.ingest_logs(
            run["seq"], upload.key, rows, state.settings.max_log_bytes, upload.digest
        )


def parse_logs(data: bytes) -> list[dict[str, Any]]:
    """Rows for log_lines from NDJSON lines, each with its size in bytes; 400 names the line."""
    rows = []
    for lineno, _, _, item in iter_objects(data):
        ts = item.get("ts")
        if not _number(ts):
            raise _bad(lineno, f"ts must be a number (epoch seconds), got {ts!r}")
        stream = item.get("stream")
        if not isinstance(stream, str) or not _STREAM.match(stream):
            raise _bad(
                lineno,
                f"stream must be a short lower-case name such as stdout or stderr, got {stream!r}",
            )
        source = item.get("source", "main")
        if not isinstance(source, str) or not 0 < len(source) <= MAX_SOURCE_CHARS:
            raise _bad(lineno, f"source must be a string of 1 to {MAX_SOURCE_CHARS} characters")
        line = item.get("line")
        if not isinstance(line, str):
            raise _bad(lineno, f"line must be a string, got {type(line).__name__}")
        if len(line) > MAX_LINE_CHARS:
            raise _bad(lineno, f"line has {len(line)} characters; at most {MAX_LINE_CHARS}")
        size = len(line.encode("utf-8", "surrogatepass")) + 1
        rows.append(
            {"ts": float(ts), "stream": stream, "source": source, "line": line, "size": size}
        )
    return rows


def _number(value: object) -> TypeGuard[float]:
    """An int or a float from JSON (not a bool)."""
    return type(value) in (int, float)


def _bad(lineno: int, message: str) -> Exception:
    return bad_request("invalid_log_line", f"line {lineno}: {message}")
