"""
Exports, streamed page by page so memory stays flat whatever the run's size:

- metrics.ndjson / metrics.parquet: one row per point, `key, step, value, ts`, by key then step;
  then the rows logged without a step (`step` null), by key then time. `kind=eval`: only the
  keys under `eval/`; `kind=train`: the others.
- episodes.ndjson: the stored records, byte for byte, in upload order (of the episodes that
  match `kind`, `subset`, `env` when given).
- episodes.parquet: the index columns (with `trained_step`) plus `record`, the record's JSON
  text.
- annotations.ndjson: every annotation as sent, with its producer and time, in stored order.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool
from starlette.responses import StreamingResponse

from ..annotations import public
from ..segments import iter_segment, read_record
from ..state import ServerState
from ..store.episodes import INDEX_COLUMNS
from ..store.metrics import is_kind
from .deps import Caller, State, readable_run

__all__ = ["router"]

router = APIRouter(tags=["export"])

METRICS_PAGE = 50_000
EPISODES_PAGE = 500

Export = Literal[
    "metrics.ndjson",
    "metrics.parquet",
    "episodes.ndjson",
    "episodes.parquet",
    "annotations.ndjson",
]


@router.get(
    "/runs/{run_id}/export/{name}",
    responses={
        200: {
            "content": {"application/x-ndjson": {}, "application/vnd.apache.parquet": {}},
            "description": "the export, streamed",
        }
    },
)
async def export(
    run_id: str,
    name: Export,
    state: State,
    caller: Caller,
    stream: Literal["episodes", "traces"] = "episodes",
    kind: Annotated[
        Literal["train", "eval"] | None,
        Query(description="episodes of this kind; metrics: eval = the keys under `eval/`"),
    ] = None,
    subset: Annotated[str | None, Query(max_length=32, description="episodes of a cohort")] = None,
    env: Annotated[str | None, Query(max_length=1024, description="episodes of an env")] = None,
) -> StreamingResponse:
    """Metrics, episodes (`stream=traces` for bare traces) or annotations, as NDJSON or
    Parquet; `kind`, `subset` and `env` select what is exported (default everything)."""
    run = await readable_run(state, caller, run_id)
    seq = run["seq"]
    filters = {"kind": kind, "subset": subset, "env": env}
    body: AsyncIterator[bytes]
    if name == "metrics.ndjson":
        body = _metrics_ndjson(state, seq, kind)
    elif name == "metrics.parquet":
        body = _parquet(_metrics_tables(state, seq, kind))
    elif name == "episodes.ndjson":
        if any(v is not None for v in filters.values()):
            body = _episodes_ndjson_filtered(state, seq, stream, filters)
        else:
            body = _episodes_ndjson(state, seq, stream)
    elif name == "episodes.parquet":
        body = _parquet(_episode_tables(state, seq, stream, filters))
    else:
        body = _annotations_ndjson(state, seq)
    media = "application/x-ndjson" if name.endswith(".ndjson") else "application/vnd.apache.parquet"
    filename = name.replace("episodes", stream)
    headers = {"Content-Disposition": f'attachment; filename="{run["id"]}-{filename}"'}
    return StreamingResponse(body, media_type=media, headers=headers)


async def _metric_pages(
    state: ServerState, seq: int, kind: str | None
) -> AsyncIterator[tuple[str, list[tuple[int | None, float, float | None]]]]:
    keys = [(n, k) for n, k in await state.store.metric_key_ids(seq) if is_kind(n, kind)]
    for name, key_id in keys:
        after = -1
        while page := await state.store.metric_points(key_id, after, METRICS_PAGE):
            yield name, list(page)
            after = page[-1][0]
    for name, key_id in keys:
        after_ts = float("-inf")
        while timed := await state.store.metric_time_points(key_id, after_ts, METRICS_PAGE):
            yield name, [(None, value, ts) for ts, value in timed]
            after_ts = timed[-1][0]


async def _metrics_ndjson(state: ServerState, seq: int, kind: str | None) -> AsyncIterator[bytes]:
    async for name, page in _metric_pages(state, seq, kind):
        yield b"".join(
            orjson.dumps({"key": name, "step": s, "value": v, "ts": t}) + b"\n" for s, v, t in page
        )


async def _metrics_tables(state: ServerState, seq: int, kind: str | None) -> AsyncIterator[Any]:
    import pyarrow as pa

    schema = pa.schema(
        [("key", pa.string()), ("step", pa.int64()), ("value", pa.float64()), ("ts", pa.float64())]
    )
    yield schema
    async for name, page in _metric_pages(state, seq, kind):
        steps, values, ts = zip(*page, strict=True)
        yield pa.table(
            {"key": [name] * len(page), "step": steps, "value": values, "ts": ts}, schema=schema
        )


async def _episodes_ndjson(state: ServerState, seq: int, stream: str) -> AsyncIterator[bytes]:
    for key in await state.store.segment_keys(seq, stream):
        blob = await run_in_threadpool(state.blobs.get, key)
        pieces = iter_segment(blob)
        while piece := await run_in_threadpool(next, pieces, b""):
            yield piece


async def _episodes_ndjson_filtered(
    state: ServerState, seq: int, stream: str, filters: dict[str, Any]
) -> AsyncIterator[bytes]:
    after = 0
    while rows := await state.store.episode_page(seq, stream, after, EPISODES_PAGE, **filters):
        records = await run_in_threadpool(_read_records, state, rows)
        yield "".join(record + "\n" for record in records).encode()
        after = rows[-1]["seq"]


async def _annotations_ndjson(state: ServerState, seq: int) -> AsyncIterator[bytes]:
    after = 0
    while rows := await state.store.annotation_page(seq, after, EPISODES_PAGE):
        yield b"".join(orjson.dumps(public(r)) + b"\n" for r in rows)
        after = rows[-1]["seq"]


async def _episode_tables(
    state: ServerState, seq: int, stream: str, filters: dict[str, Any]
) -> AsyncIterator[Any]:
    import pyarrow as pa

    schema = pa.schema(
        [
            ("id", pa.string()),
            ("stream", pa.string()),
            ("step", pa.int64()),
            ("reward", pa.float64()),
            ("env", pa.string()),
            ("ok", pa.bool_()),
            ("tokens", pa.int64()),
            ("duration", pa.float64()),
            ("kind", pa.string()),
            ("subset", pa.string()),
            ("trained_step", pa.int64()),
            ("record", pa.string()),
        ]
    )
    yield schema
    after = 0
    while rows := await state.store.episode_page(seq, stream, after, EPISODES_PAGE, **filters):
        records = await run_in_threadpool(_read_records, state, rows)
        columns = {c: [r[c] for r in rows] for c in INDEX_COLUMNS}
        columns["record"] = records
        yield pa.table(columns, schema=schema)
        after = rows[-1]["seq"]


def _read_records(state: ServerState, rows: list[dict[str, Any]]) -> list[str]:
    """The JSON text of each row's record, reading each frame once."""
    frames: dict[tuple[str, int], bytes] = {}
    out = []
    for r in rows:
        where = (r["blob_key"], r["frame_offset"])
        if where not in frames:
            frames[where] = state.blobs.get_range(
                r["blob_key"], r["frame_offset"], r["frame_length"]
            )
        out.append(read_record(frames[where], r["offset"], r["length"]).decode())
    return out


class _Sink:
    """A write-only file for pyarrow that hands out what was written so far."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.closed = False
        self.position = 0

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self.chunks.append(chunk)
        self.position += len(chunk)
        return len(chunk)

    def tell(self) -> int:
        return self.position

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def take(self) -> bytes:
        out = b"".join(self.chunks)
        self.chunks.clear()
        return out


async def _parquet(tables: AsyncIterator[Any]) -> AsyncIterator[bytes]:
    """A Parquet file, one row group per table; the first item of `tables` is the schema."""
    import pyarrow.parquet as pq

    sink = _Sink()
    schema = await anext(tables)
    writer = pq.ParquetWriter(sink, schema)
    async for table in tables:
        await run_in_threadpool(writer.write_table, table)
        if chunk := sink.take():
            yield chunk
    await run_in_threadpool(writer.close)
    yield sink.take()
