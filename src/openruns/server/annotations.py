"""
Annotations: later facts about an episode, from any producer, stored append-only and folded
into the episode when it is read.

An annotation is one NDJSON line:

    {"episode_id": "e1",                  required: the episode it is about
     "trace_id": "t1",                    optional: one trace of it
     "step": 12,                          optional: the step the episode was trained at
     "info": {"advantage": 0.4, "effective": true, "ship": {"step": 12, "time": ...}},
     "branches": [{"index": 0, "trainer_logprobs": [...], "entropies": [...]}],
     "producer": "trainer",               default "main"
     "ts": 1790000000.5}                  default: when the server stored it

Folding, in the order annotations were stored (newest wins): `info` is deep-merged into the
trace's `info` (with `trace_id`) or the episode's; `branches` streams are merged by branch
index into `annotated_branches` beside it; and the episode gets `annotations`: how many there
are, their producers, and `trained_step` (the latest step they name). The stored record itself
never changes: `?annotations=false` reads it as it was uploaded.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import orjson
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from .admission import ingest_owner
from .body import iter_objects
from .errors import ApiError, bad_request
from .ingest import receive  # the shared receive step: body, receipt, decompression
from .segments import is_step
from .state import ServerState
from .store.metrics import MAX_STEP
from .store.rows import RunRow
from .store.runs import require_running_or_grace

__all__ = ["fold", "parse_annotations", "public", "upload_annotations"]

MAX_ID_CHARS = 256
MAX_PRODUCER_CHARS = 128
MAX_BRANCH_INDEX = 65_535  # folding makes a list this long: bound it


async def upload_annotations(
    state: ServerState, request: Request, run: RunRow, key: str | None
) -> dict[str, Any]:
    require_running_or_grace(run, time.time(), state.settings.finish_grace)
    async with state.gate.admit(ingest_owner(request)) as ticket:
        upload = await receive(state, request, run, "annotations", key, ticket)
        if upload.prior is not None:
            return upload.prior
        rows = await run_in_threadpool(parse_annotations, upload.data, time.time())
        return await state.store.ingest_annotations(run["seq"], upload.key, rows, upload.digest)


def parse_annotations(data: bytes, now: float) -> list[dict[str, Any]]:
    """Rows for the annotations table from NDJSON lines; 400 names the bad line."""
    rows = []
    for lineno, offset, length, item in iter_objects(data):
        episode_id = item.get("episode_id")
        if not isinstance(episode_id, str) or not 0 < len(episode_id) <= MAX_ID_CHARS:
            raise _bad(lineno, f"episode_id must be a string of 1 to {MAX_ID_CHARS} characters")
        trace_id = item.get("trace_id")
        if trace_id is not None and (
            not isinstance(trace_id, str) or not 0 < len(trace_id) <= MAX_ID_CHARS
        ):
            raise _bad(lineno, f"trace_id must be a string of 1 to {MAX_ID_CHARS} characters")
        step = item.get("step")
        if step is not None and not is_step(step):
            raise _bad(
                lineno,
                f"step (the step trained at) must be an integer from 0 to {MAX_STEP}, got {step!r}",
            )
        if not isinstance(item.get("info", {}), dict):
            raise _bad(lineno, "info must be an object")
        branches = item.get("branches", [])
        if not isinstance(branches, list) or not all(
            isinstance(b, dict)
            and type(b.get("index")) is int
            and 0 <= b["index"] <= MAX_BRANCH_INDEX
            for b in branches
        ):
            raise _bad(
                lineno,
                f"branches must be a list of objects with an integer index from 0 to "
                f"{MAX_BRANCH_INDEX}",
            )
        producer = item.get("producer", "main")
        if not isinstance(producer, str) or not 0 < len(producer) <= MAX_PRODUCER_CHARS:
            raise _bad(lineno, f"producer must be a string of 1 to {MAX_PRODUCER_CHARS} characters")
        ts = item.get("ts", now)
        if type(ts) not in (int, float):
            raise _bad(lineno, f"ts must be a number (epoch seconds), got {ts!r}")
        rows.append(
            {
                "episode_id": episode_id,
                "trace_id": trace_id,
                "producer": producer,
                "step": step,
                "ts": float(ts),
                "body": bytes(data[offset : offset + length]).decode(),
            }
        )
    return rows


def public(row: dict[str, Any]) -> dict[str, Any]:
    """An annotation as readers get it: as sent, with its producer and time filled in."""
    body = orjson.loads(row["body"])
    return {**body, "producer": row["producer"], "ts": row["ts"]}


def fold(record: bytes, rows: list[dict[str, Any]]) -> bytes:
    """The record with its annotations (oldest first) folded in; see the module docstring. The
    caller has verified the record (segment_reads.read_record): damage is a 410 before this;
    a stored line that is not an object is a 422 naming `annotations=false`."""
    if not rows:
        return record
    try:
        doc: Any = orjson.loads(record)
    except orjson.JSONDecodeError:
        doc = None
    if not isinstance(doc, dict):  # only a batch whose frames hold other lines than objects
        raise ApiError(
            422,
            "unfoldable_record",
            "the stored record is not a JSON object, so its annotations cannot be folded into "
            "it; read it as stored with annotations=false",
        )
    traces: list[Any] = doc["traces"] if isinstance(doc.get("traces"), list) else []
    by_id = {t["id"]: t for t in traces if isinstance(t, dict) and isinstance(t.get("id"), str)}
    trained: int | None = None
    producers: set[str] = set()
    for row in rows:
        annotation = orjson.loads(row["body"])
        producers.add(row["producer"])
        if row["step"] is not None:
            trained = row["step"] if trained is None else max(trained, row["step"])
        target = by_id.get(row["trace_id"], doc) if row["trace_id"] else doc
        if annotation.get("info"):
            info = target.get("info")
            target["info"] = _merge(info if isinstance(info, dict) else {}, annotation["info"])
        for branch in annotation.get("branches") or []:
            slots = target.get("annotated_branches")
            if not isinstance(slots, list) or not all(isinstance(x, dict) for x in slots):
                slots = target["annotated_branches"] = []
            while len(slots) <= branch["index"]:
                slots.append({"index": len(slots)})
            slots[branch["index"]].update(branch)
    doc["annotations"] = {
        "count": len(rows),
        "producers": sorted(producers),
        "trained_step": trained,
    }
    return orjson.dumps(doc)


def _merge(base: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _bad(lineno: int, message: str) -> Exception:
    return bad_request("invalid_annotation", f"line {lineno}: {message}")
