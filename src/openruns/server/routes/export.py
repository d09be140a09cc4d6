"""
Exports, streamed page by page so memory stays flat whatever the run's size:

- metrics.ndjson / metrics.parquet: one row per point, `key, step, value, ts`, by key then step;
  then the rows logged without a step (`step` null), by key then time. `kind=eval`: only the
  keys under `eval/`; `kind=train`: the others.
- episodes.ndjson: the stored records, byte for byte, one per line, in upload order (of the
  episodes that match `kind`, `subset`, `env` when given).
- episodes.parquet: the index columns (with `trained_step`) plus `record`, the record's JSON
  text.
- annotations.ndjson: every annotation as sent, with its producer and time, in stored order.

An export sends only the stored records: each is read through its index row and checked as
every read is (segment_reads.py: the digest of its frames, kept at ingest; for rows indexed
before 0012, the frames' checksums and the record's id), before any of it is sent. An export is
never cut mid-stream. An error before its first byte (the run, the database) is an ordinary
error answer. After that, what cannot be read is skipped and counted: the records of a segment
that is missing, truncated, damaged or not the one indexed (another run's blob in its place),
or the rest of the export when the database stops answering. Such an export ends with what it
left out: NDJSON with one last line `{"_openruns_export": {"complete": false,
"skipped_records": N, "damaged": [{"segment", "records", "reason"}], "stopped": reason |
null}}`, Parquet with the same as the file's key-value metadata (`openruns.export`). A
complete export has neither.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import orjson
import zstandard
from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool
from starlette.responses import StreamingResponse

from ..annotations import public
from ..errors import ApiError
from ..segment_reads import DamagedSegment, Location, RecordReader, WholeBlobs, iter_lines
from ..state import ServerState
from ..store import episodes, metric_key_ids, metric_reads, metric_times
from ..store.annotations import page as annotations_page
from ..store.episodes import INDEX_COLUMNS
from ..store.metrics import is_kind
from .deps import Caller, State, readable_run

__all__ = ["ExportReport", "ndjson_to_the_end", "router"]

router = APIRouter(tags=["export"])
logger = logging.getLogger("openruns.server")

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
    report = ExportReport(run["id"])
    body: AsyncIterator[bytes]
    if name == "metrics.ndjson":
        body = _metrics_ndjson(state, seq, kind)
    elif name == "metrics.parquet":
        body = _parquet(_metrics_tables(state, seq, kind), report)
    elif name == "episodes.ndjson":
        body = _episodes_ndjson(state, seq, stream, filters, report)
    elif name == "episodes.parquet":
        body = _parquet(_episode_tables(state, seq, stream, filters, report), report)
    else:
        body = _annotations_ndjson(state, seq)
    first = await anext(body, b"")  # an error before the first byte is an error answer
    if name.endswith(".ndjson"):
        body = ndjson_to_the_end(first, body, report)
    else:
        body = _after(first, body)
    media = "application/x-ndjson" if name.endswith(".ndjson") else "application/vnd.apache.parquet"
    filename = name.replace("episodes", stream)
    headers = {"Content-Disposition": f'attachment; filename="{run["id"]}-{filename}"'}
    return StreamingResponse(body, media_type=media, headers=headers)


@dataclass
class ExportReport:
    """What an export left out (see the module docstring)."""

    run_id: str
    skipped_records: int = 0
    damaged: list[dict[str, Any]] = field(default_factory=list)
    stopped: str | None = None

    def skip(self, segment: str, records: int, reason: str) -> None:
        """Count `records` left out of `segment` (one entry per segment: the first reason)."""
        self.skipped_records += records
        entry = next((d for d in self.damaged if d["segment"] == segment), None)
        if entry is None:
            self.damaged.append({"segment": segment, "records": records, "reason": reason})
        else:
            entry["records"] += records
        logger.warning(
            "openruns: export of run %s skipped %d record(s) of the damaged segment %s (%s)",
            self.run_id,
            records,
            segment,
            reason,
        )

    def stop(self, reason: str) -> None:
        self.stopped = reason
        logger.warning("openruns: export of run %s stopped early: %s", self.run_id, reason)

    def summary(self) -> dict[str, Any] | None:
        if not self.damaged and self.stopped is None:
            return None
        return {
            "complete": False,
            "skipped_records": self.skipped_records,
            "damaged": self.damaged,
            "stopped": self.stopped,
        }


async def blob_lines(
    state: ServerState, key: str, records: int, report: ExportReport
) -> AsyncIterator[bytes]:
    """The NDJSON lines of the zstd blob `key` with no index rows (the Prime wire's sample
    objects), which holds `records` records, in pieces; a missing, damaged or short blob is
    skipped from where it fails and reported, never cut mid-line."""
    try:
        blob = await run_in_threadpool(state.blobs.get, key)
    except FileNotFoundError:
        report.skip(key, records, "the blob is missing")
        return
    pieces = iter_lines(blob)
    sent = 0
    while True:
        try:
            piece = await run_in_threadpool(next, pieces, b"")
        except zstandard.ZstdError as exc:
            report.skip(key, max(0, records - sent), f"damaged: {exc}")
            return
        if not piece:
            if sent < records:
                report.skip(key, records - sent, "truncated")
            return
        sent += sum(1 for line in piece.split(b"\n") if line.strip())
        yield piece


async def _after(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    if first:
        yield first
    async for piece in rest:
        yield piece


async def ndjson_to_the_end(
    first: bytes, rest: AsyncIterator[bytes], report: ExportReport
) -> AsyncIterator[bytes]:
    """The NDJSON export, then (if anything was left out) the line saying what."""
    try:
        async for piece in _after(first, rest):
            yield piece
    except ApiError as exc:  # the database or the blob store stopped answering
        report.stop(exc.message)
    summary = report.summary()
    if summary is not None:
        yield orjson.dumps({"_openruns_export": summary}) + b"\n"


async def _metric_pages(
    state: ServerState, seq: int, kind: str | None
) -> AsyncIterator[tuple[str, list[tuple[int | None, float, float | None]]]]:
    known = await state.store.read(metric_key_ids.run_keys, seq)
    keys = [(n, k) for n, k in known if is_kind(n, kind)]
    for name, key_id in keys:
        after = -1
        while page := await state.store.read(metric_reads.points_page, key_id, after, METRICS_PAGE):
            yield name, list(page)
            after = page[-1][0]
    for name, key_id in keys:
        after_ts = float("-inf")
        while timed := await state.store.read(
            metric_times.time_points_page, key_id, after_ts, METRICS_PAGE
        ):
            yield name, [(None, value, ts) for ts, value in timed]
            after_ts = timed[-1][0]


async def _metrics_ndjson(state: ServerState, seq: int, kind: str | None) -> AsyncIterator[bytes]:
    async for name, page in _metric_pages(state, seq, kind):
        yield b"".join(
            orjson.dumps({"key": name, "step": s, "value": v, "ts": t}) + b"\n" for s, v, t in page
        )


async def _metrics_tables(state: ServerState, seq: int, kind: str | None) -> AsyncIterator[Any]:
    import pyarrow as pa

    fields: list[tuple[str, pa.DataType]] = [
        ("key", pa.string()),
        ("step", pa.int64()),
        ("value", pa.float64()),
        ("ts", pa.float64()),
    ]
    schema = pa.schema(fields)
    yield schema
    async for name, page in _metric_pages(state, seq, kind):
        steps, values, ts = zip(*page, strict=True)
        yield pa.table(
            {"key": [name] * len(page), "step": steps, "value": values, "ts": ts}, schema=schema
        )


async def _episodes_ndjson(
    state: ServerState, seq: int, stream: str, filters: dict[str, Any], report: ExportReport
) -> AsyncIterator[bytes]:
    async for _, records in _episode_pages(state, seq, stream, filters, report):
        yield b"".join(r + b"\n" for r in records if r is not None)


async def _episode_pages(
    state: ServerState, seq: int, stream: str, filters: dict[str, Any], report: ExportReport
) -> AsyncIterator[tuple[list[dict[str, Any]], list[bytes | None]]]:
    """Pages of the index rows that match `filters`, in storage order, with their records,
    each checked against its row as every read is (segment_reads: the frames' digest, else
    their checksums and the record's id); a record that is not the stored one is None, and
    counted in `report`. Without filters every segment is read, each fetched whole once."""
    whole = all(v is None for v in filters.values())
    reader = RecordReader(WholeBlobs(state.blobs) if whole else state.blobs)
    after = 0
    while rows := await state.store.read(
        episodes.page_for_export, seq, stream, after, EPISODES_PAGE, **filters
    ):
        yield rows, await run_in_threadpool(_read_records, reader, rows, report)
        after = rows[-1]["seq"]


async def _annotations_ndjson(state: ServerState, seq: int) -> AsyncIterator[bytes]:
    after = 0
    while rows := await state.store.read(annotations_page, seq, after, EPISODES_PAGE):
        yield b"".join(orjson.dumps(public(r)) + b"\n" for r in rows)
        after = rows[-1]["seq"]


async def _episode_tables(
    state: ServerState, seq: int, stream: str, filters: dict[str, Any], report: ExportReport
) -> AsyncIterator[Any]:
    import pyarrow as pa

    fields: list[tuple[str, pa.DataType]] = [
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
    schema = pa.schema(fields)
    yield schema
    async for rows, records in _episode_pages(state, seq, stream, filters, report):
        kept = [
            (row, record) for row, record in zip(rows, records, strict=True) if record is not None
        ]
        columns = {c: [row[c] for row, _ in kept] for c in INDEX_COLUMNS}
        columns["record"] = [record.decode() for _, record in kept]
        yield pa.table(columns, schema=schema)


def _read_records(
    reader: RecordReader, rows: list[dict[str, Any]], report: ExportReport
) -> list[bytes | None]:
    """Each row's record (None for one that is not the stored one: counted in `report`)."""
    out: list[bytes | None] = []
    damaged: dict[str, tuple[int, str]] = {}
    for row in rows:
        try:
            out.append(reader.record(Location.of(row)))
        except DamagedSegment as exc:
            count, reason = damaged.get(exc.blob_key, (0, exc.reason))
            damaged[exc.blob_key] = (count + 1, reason)
            out.append(None)
    for key, (count, reason) in damaged.items():
        report.skip(key, count, reason)
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


async def _parquet(tables: AsyncIterator[Any], report: ExportReport) -> AsyncIterator[bytes]:
    """A Parquet file, one row group per table; the first item of `tables` is the schema.
    What was left out goes into the footer's key-value metadata (`openruns.export`)."""
    import pyarrow.parquet as pq

    sink = _Sink()
    schema = await anext(tables)
    # pyarrow takes any object with write(); its stubs list only IO, paths and NativeFile.
    writer = pq.ParquetWriter(sink, schema)  # type: ignore[arg-type]
    started = False
    try:
        async for table in tables:
            await run_in_threadpool(writer.write_table, table)
            if chunk := sink.take():
                started = True
                yield chunk
    except ApiError as exc:
        if not started:
            raise  # nothing sent yet: an ordinary error answer
        report.stop(exc.message)
    summary = report.summary()
    if summary is not None:
        writer.add_key_value_metadata({"openruns.export": orjson.dumps(summary).decode()})
    await run_in_threadpool(writer.close)
    yield sink.take()
