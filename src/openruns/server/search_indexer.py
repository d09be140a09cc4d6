"""
The search indexer: a task of the server's lifespan that follows the episodes table by seq and
adds each committed record's text to the full-text index (store/search.py).

    task = asyncio.create_task(follow(state))

It never touches an upload's request or transaction: uploads commit as before, and the index
catches up behind them. Each round reads the index rows after its cursor (at most BATCH_ROWS
rows, or BATCH_FRAME_BYTES of compressed frames), reads their records from the blob store,
extracts their text on a worker thread, and writes the documents (at most BATCH_TEXT_CHARS of
text) and the new cursor in one short transaction. Between rounds it rests for as long as the
round took (three times as long while uploads are in flight), so it takes at most half of one
core, and a quarter while ingest is busy; with nothing new it looks again every IDLE_SECONDS.
Several replicas may run it: the cursor is moved by compare-and-set, and a round that lost the
race is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from starlette.concurrency import run_in_threadpool

from .errors import ApiError
from .rollouts import Location, load_records, parse, record_text
from .state import ServerState
from .store import search
from .store.search import Document

__all__ = ["build_documents", "follow", "index_round"]

logger = logging.getLogger("openruns.server")

BATCH_ROWS = 256
BATCH_FRAME_BYTES = 16 * 1024 * 1024
# Text written in one transaction: the writer thread is the uploads' too, so a round holds it
# for ~0.1-0.2 s at most (FTS5 takes ~10-20 MB/s of text here).
BATCH_TEXT_CHARS = 2_000_000
IDLE_SECONDS = 1.0
ERROR_SECONDS = 10.0


async def follow(state: ServerState) -> None:
    """Index forever (until cancelled)."""
    while True:
        started = time.monotonic()
        try:
            indexed = await index_round(state)
        except ApiError as exc:  # a busy, unreachable or full database: its message says which
            logger.warning("openruns: the search indexer paused: %s", exc.message)
            await asyncio.sleep(ERROR_SECONDS)
            continue
        except Exception:  # a blob that cannot be read: try again later
            logger.warning("openruns: the search indexer failed; retrying", exc_info=True)
            await asyncio.sleep(ERROR_SECONDS)
            continue
        if not indexed:
            await asyncio.sleep(IDLE_SECONDS)
            continue
        took = time.monotonic() - started
        await asyncio.sleep(took * (3 if state.gate.active else 1))


async def index_round(state: ServerState) -> int:
    """Index the next batch of rows; returns how many the round covered (0: none new)."""
    cursor = await state.store.read(search.indexed_seq)
    rows = _bounded(await state.store.read(search.pending, cursor, BATCH_ROWS))
    if not rows:
        return 0
    docs = _within_text_budget(await run_in_threadpool(build_documents, state, rows))
    newest = docs[-1][0]  # rows after it are read again next round
    if not await state.store.write(search.add_documents, cursor, newest, docs):
        return 0  # another replica indexed these
    return len(docs)


def _bounded(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first rows whose distinct frames come to at most BATCH_FRAME_BYTES (at least one)."""
    frames: set[tuple[str, int]] = set()
    total = 0
    for i, row in enumerate(rows):
        frame = (row["blob_key"], row["frame_offset"])
        if frame not in frames:
            frames.add(frame)
            total += row["frame_length"]
            if total > BATCH_FRAME_BYTES and i > 0:
                return rows[:i]
    return rows


def _within_text_budget(docs: list[Document]) -> list[Document]:
    """The first documents whose text comes to at most BATCH_TEXT_CHARS (at least one)."""
    total = 0
    for i, doc in enumerate(docs):
        total += len(doc[4])
        if total > BATCH_TEXT_CHARS and i > 0:
            return docs[:i]
    return docs


def build_documents(state: ServerState, rows: list[dict[str, Any]]) -> list[Document]:
    """(seq, run_seq, stream, kind, text) of each row; a record that cannot be read or parsed
    is indexed without text (so the indexer never stops on it), and the failure is logged."""
    locations = [Location.of(r) for r in rows]
    try:
        records = load_records(state.blobs, locations)
    except Exception:  # a missing or damaged segment: read record by record, skip what fails
        records = [_load_one(state, loc) for loc in locations]
    docs: list[Document] = []
    for row, raw in zip(rows, records, strict=True):
        record = parse(raw) if raw else None
        text = "\n".join(t for _, t in record_text(record)) if record is not None else ""
        docs.append((row["seq"], row["run_seq"], row["stream"], _kind(record), text))
    return docs


def _kind(record: Any) -> str | None:
    """The work a record did: `run.work.type` (train / eval inside a training run), else the
    run's type."""
    run = record.get("run") if isinstance(record, dict) else None
    if not isinstance(run, dict):
        return None
    work = run.get("work")
    kind = work.get("type") if isinstance(work, dict) else None
    kind = kind or run.get("type")
    return kind if isinstance(kind, str) else None


def _load_one(state: ServerState, location: Location) -> bytes:
    try:
        return load_records(state.blobs, [location])[0]
    except Exception as exc:
        logger.warning(
            "openruns: the search indexer cannot read a record of %s: %s", location.blob_key, exc
        )
        return b""
