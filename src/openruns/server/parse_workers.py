"""
Metrics uploads parsed on other cores, while this process writes.

One run's uploads are written one at a time (the run's lock; SQLite has one writer anyway), and
parsing an upload (decoding it, its JSON, its columns: some 40 % of the server's time for dense
rows, measured) took the writer's core as well. Worker processes parse uploads into their
batches while this process writes the one before, so the parse runs on another core: plain
rows of numbers by Arrow's JSON reader (plain_rows, two to three times as fast), any other
upload by `metric_rows.metric_batches`, the code this process runs.

Which uploads go to a worker: bodies of MIN_BODY_BYTES to MAX_BYTES as sent. The worker
decodes the body, measuring it as body.survey does (its limits, its digest) in the same pass,
so an upload is decoded once, off this process. Below, the trip costs more than the parse; a
body that decodes to more than MAX_BYTES comes back unread at that bound and streams through
this process a chunk at a time, so its memory follows the chunk, not its size. A worker's
batches are held whole until they are written, which columns make cheap (8 bytes a value) but
loose rows do not (~250 bytes a point as Python objects): past MAX_LOOSE_POINTS a worker gives
up and the upload streams here. A bad body or line is refused as it would be here (the same
4xx, nothing stored), and a worker that dies costs nothing but the trip: the upload is parsed
here, and the next one starts a new pool.

The pool starts with the first upload that would go to it, so a server that never gets one
never starts a process; until its workers are up (their imports take a second or two) uploads
are parsed here, so none waits for them. Workers ignore SIGINT (a terminal's Ctrl-C reaches the
whole process group: stopping is the server's to do), and exit when the server closes the pool,
or when it is gone (SIGKILL): a thread of each watches its parent.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import NamedTuple

from .body import INFLATED_TOO_LARGE, DecodeLimits, Survey, decode_surveyed, stream_objects
from .errors import ApiError
from .metric_rows import Batch, metric_batches, whole_chunks
from .store.metrics import MetricPoints

__all__ = ["MAX_BYTES", "MAX_LOOSE_POINTS", "MIN_BODY_BYTES", "ParseWorkers"]

logger = logging.getLogger("openruns.server")

MiB = 1024 * 1024
# A body as sent: ~256 KiB of NDJSON numbers compress to ~64 KiB (zstd, 3.7x in the fleet
# benchmark's rows), where the trip (pickling, a context switch) starts to cost less than the
# parse.
MIN_BODY_BYTES = 64 * 1024
MAX_BYTES = 32 * MiB  # decoded: a worker's bound
MAX_LOOSE_POINTS = 100_000
_GENERAL_POINTS = MAX_LOOSE_POINTS // 2  # a batch of the row-by-row path
_PARENT_CHECK_S = 1.0

Parsed = tuple[Survey, list[tuple[int, Batch]]]


class _Refusal(NamedTuple):
    """An ApiError as it crosses back from a worker (its own pickling loses its fields)."""

    status: int
    code: str
    message: str
    headers: dict[str, str] | None


class ParseWorkers:
    """A pool of `workers` processes (0: none, every upload parses in this process), started
    on first use; `close` ends it."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None
        self._starting: list[Future[None]] = []
        self._said = False
        self._closed = False
        self._lock = threading.Lock()

    def takes(self, body_bytes: int) -> bool:
        """Whether an upload whose body is `body_bytes` long as sent goes to a worker: one of
        its size starts the pool if there is none, and goes once the workers are up."""
        if not (self.workers > 0 and MIN_BODY_BYTES <= body_bytes <= MAX_BYTES):
            return False
        with self._lock:
            if self._closed:
                return False
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    self.workers,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_worker_started,
                    initargs=(os.getpid(),),
                )
                # A pool spawns a worker for a task when none is idle: one task each.
                self._starting = [self._pool.submit(_up) for _ in range(self.workers)]
            return self.ready()

    def ready(self) -> bool:
        """Whether the pool's workers are up. A pool whose workers could not start is left
        alone, said once in the log: its uploads are parsed here."""
        if not all(f.done() for f in self._starting):
            return False
        failed = [f.exception() for f in self._starting if f.exception() is not None]
        if failed and not self._said:
            self._said = True
            logger.warning(
                "parse workers could not start (%s); uploads are parsed in the server", failed[0]
            )
        return bool(self._starting) and not failed

    def pids(self) -> list[int]:
        """The process ids of the pool's workers (none before it starts)."""
        pool = self._pool
        return list(getattr(pool, "_processes", None) or ()) if pool is not None else []

    async def parse(self, body: bytes, encoding: str | None, limits: DecodeLimits) -> Parsed | None:
        """An upload (its body as sent, in `encoding`) measured as body.survey measures it
        within `limits`, and its batches, by a worker; None when it is for this process to
        parse (past MAX_BYTES decoded, too many loose points, or the worker died). A bad body
        raises the ApiError this process would raise. Call it once `takes` said so."""
        pool = self._pool
        if pool is None:  # closed, or dropped by a concurrent upload whose worker died
            return None
        loop = asyncio.get_running_loop()
        try:
            outcome = await loop.run_in_executor(pool, _parse, body, encoding, limits)
        except BrokenProcessPool:
            self._drop(pool)
            return None
        if isinstance(outcome, _Refusal):
            raise ApiError(outcome.status, outcome.code, outcome.message, outcome.headers)
        return outcome

    def close(self) -> None:
        with self._lock:
            pool, self._pool, self._closed = self._pool, None, True
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def _drop(self, pool: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is pool:
                self._pool = None
        pool.shutdown(wait=False, cancel_futures=True)


# -- in the worker -------------------------------------------------------------------------------


def _worker_started(parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with, args=(parent,), daemon=True).start()


def _up() -> None:
    """The task that starts a worker (its initializer and imports run first)."""


def _exit_with(parent: int) -> None:
    """Exit when the parent is gone: its pipe to us stays open (we hold both ends of our
    queue), so nothing else would tell a worker blocked on it."""
    while os.getppid() == parent:
        time.sleep(_PARENT_CHECK_S)
    os._exit(0)


def _parse(body: bytes, encoding: str | None, limits: DecodeLimits) -> Parsed | _Refusal | None:
    """The upload measured (body.decode_surveyed: the server's limits, capped at MAX_BYTES)
    and its batches: plain rows by Arrow's reader (plain_rows), any other upload row by row
    (metric_rows), which refuses a bad one. None: past MAX_BYTES, or MAX_LOOSE_POINTS.

    The batches are held whole anyway, so plain rows are not cut into the server's
    `metric_chunk_points` (plain_batches gets the decoded size as its bound: an upload of that
    many bytes holds fewer points): each run of alike rows is one batch, and its 4096-step
    chunks are written once. Cut into batches of 50,000 points, a 10,000-row upload of 20
    metrics was written as four, each rewriting the chunk the one before had begun: twice the
    write. The row-by-row path still yields its
    loose points every _GENERAL_POINTS, so a worker gives up on them (MAX_LOOSE_POINTS) before
    it holds more; its columns are regrouped at chunk ends.
    """
    # Arrow is imported here, in the worker: the server would hold its ~35 MB for nothing.
    from .plain_rows import plain_batches

    batches: list[tuple[int, Batch]] = []
    loose = 0
    capped = limits.max_bytes > MAX_BYTES
    try:
        if capped:
            limits = dataclasses.replace(limits, max_bytes=MAX_BYTES)
        data, measured = decode_surveyed(body, encoding, limits)
        parsed: Iterable[tuple[int, Batch]] | None = plain_batches(data, measured.size)
        if parsed is None:
            general = metric_batches(stream_objects((data,)), _GENERAL_POINTS)
            parsed = whole_chunks(general, _GENERAL_POINTS)
        for rows, batch in parsed:
            if isinstance(batch, MetricPoints):
                loose += len(batch) + len(batch.by_time)
                if loose > MAX_LOOSE_POINTS:
                    return None
            batches.append((rows, batch))
    except ApiError as exc:
        if capped and exc.code == INFLATED_TOO_LARGE:
            return None  # within the server's limit: streamed there
        headers = dict(exc.headers) if exc.headers else None
        return _Refusal(exc.status_code, exc.code, exc.message, headers)
    return measured, batches
