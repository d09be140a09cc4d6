"""
The upload pipeline of one run in one process:

    log_*() --> RecordQueue --> encoder thread --> handoff (bounded) --> sink thread --> Sink
                (references)    to_mapping, stamp,   (batches)          compress + write
                                orjson, batch

Work is split over two threads because encoding holds the GIL while zstd releases it: the
encoder builds the next batch while the sink thread compresses and writes the last one.
Accounting is exact: every record accepted by the queue ends up written, failed (by sink, or
`encode` when it could not be turned into JSON), or, if close() runs out of time, dropped.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..records import flatten_metrics, index_fields, record_step, stamp_run, to_mapping
from . import fork
from .encoder import Batch, BatchBuilder, encode_metrics_row, encode_record, yield_gil
from .queue import Item, RecordQueue

__all__ = ["Pipeline", "Sink", "Stats"]

logger = logging.getLogger("openruns")

POLL_SECONDS = 0.2
# A batch is handed on when it is this old even if not full, so readers see data within ~1 s.
MAX_BATCH_AGE = 1.0
HANDOFF_BATCHES = 4
_STOP = object()


class Sink(Protocol):
    """A destination of encoded batches. Called from the sink thread only."""

    name: str

    def write(self, batch: Batch) -> None: ...  # raise to fail the whole batch
    def flush(self) -> None: ...  # everything written so far is durable / acknowledged
    def close(self) -> None: ...
    def drop(self) -> None: ...  # after fork: forget inherited descriptors, never flush them


@dataclass
class Stats:
    """What happened to the records this process logged."""

    written: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    first_error: BaseException | None = None
    dropped_values: int = 0
    _seen: set[str] = field(default_factory=set)

    def count_written(self, stream: str, n: int) -> None:
        self.written[stream] = self.written.get(stream, 0) + n

    def count_failed(self, where: str, n: int, exc: BaseException, what: str) -> None:
        self.failed[where] = self.failed.get(where, 0) + n
        self.record_error(what, exc)

    def record_error(self, what: str, exc: BaseException) -> None:
        message = f"{what} failed: {type(exc).__name__}: {exc}"
        if self.first_error is None:
            self.first_error = exc
        if message not in self._seen:  # one line per distinct failure, however often it repeats
            self._seen.add(message)
            self.errors.append(message)
            logger.warning("openruns: %s", message)


class Pipeline:
    def __init__(
        self,
        make_sink: Callable[[], Sink],
        run_id: str,
        run_type: str,
        max_queued_records: int,
        batch_bytes: int = 16 * 1024 * 1024,
    ):
        self._make_sink = make_sink
        self._run_id = run_id
        self._run_type = run_type
        self._batch_bytes = batch_bytes
        self._max_records = max_queued_records
        self.stats = Stats()
        self._warned_keys: set[str] = set()
        self._dropped_at_close = 0
        self._reset()
        fork.register(self)

    def _reset(self) -> None:
        self._queue = RecordQueue(self._max_records)
        self._handoff: queue.Queue[Any] = queue.Queue(HANDOFF_BATCHES)
        self._threads: list[threading.Thread] = []
        self._start_lock = threading.Lock()
        self._closed = False
        self._sink: Sink | None = None

    # -- producer side: cheap, never blocking -------------------------------------------------

    def put(self, item: Item) -> bool:
        if not self._threads:
            self.start()  # a forked child starts its threads on first use
        return self._queue.put(item)

    @property
    def sink(self) -> Sink | None:
        return self._sink

    @property
    def dropped(self) -> int:
        return self._queue.dropped + self._dropped_at_close

    # -- lifecycle ----------------------------------------------------------------------------

    def flush(self, timeout: float | None) -> bool:
        """Barrier: True when everything put before it is written (or counted failed)."""
        if not self._threads:
            return True
        done = threading.Event()
        self._queue.put_control(Item("barrier", done, 0, None, 0.0))
        return done.wait(timeout)

    def close(self, timeout: float | None) -> bool:
        """Drain and stop within `timeout`; what is left is counted as dropped. Idempotent."""
        if self._closed:
            return True
        self._closed = True
        if not self._threads:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        self._queue.put_control(Item("barrier", _STOP, 0, None, 0.0))
        for thread in self._threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in self._threads):
            unsent = self._queue.accepted - sum(self.stats.written.values())
            unsent -= sum(self.stats.failed.values())
            self._dropped_at_close = max(0, unsent)
            logger.warning(
                "openruns: uploads did not drain within %.1f s; %d records were not written "
                "(counted in run.dropped_records)",
                timeout or 0.0,
                self._dropped_at_close,
            )
            return False
        return True

    def _after_fork_in_child(self) -> None:
        # The parent writes everything it queued; the child starts empty, with its own threads
        # and its own sink (new writer id), and drops the parent's descriptors unflushed.
        sink = self._sink
        self._reset()
        if sink is not None:
            sink.drop()
        self.stats = Stats()
        self._dropped_at_close = 0

    def start(self) -> None:
        with self._start_lock:
            if self._threads:
                return
            self._sink = self._make_sink()
            self._threads = [
                threading.Thread(target=self._encode_loop, name="openruns-encoder", daemon=True),
                threading.Thread(target=self._sink_loop, name="openruns-writer", daemon=True),
            ]
            for thread in self._threads:
                thread.start()

    # -- encoder thread -----------------------------------------------------------------------

    def _encode_loop(self) -> None:
        builders = {
            stream: BatchBuilder(stream, self._batch_bytes)
            for stream in ("metrics", "episodes", "traces")
        }
        wakeup = self._queue.wakeup
        while True:
            wakeup.wait(POLL_SECONDS)
            wakeup.clear()
            for item in self._queue.take_all():
                if item.kind == "barrier":
                    for builder in builders.values():
                        self._hand_on(builder.take())
                    self._handoff.put(item.payload)
                    if item.payload is _STOP:
                        return
                    continue
                builder = builders[item.kind]
                if item.kind == "metrics":
                    self._hand_on(builder.add(self._metrics_line(item)))
                    yield_gil()
                else:
                    for record in item.payload:
                        self._add_record(builder, record, item.step)
                        yield_gil()
            for builder in builders.values():
                if builder.age() >= MAX_BATCH_AGE:
                    self._hand_on(builder.take())

    def _metrics_line(self, item: Item) -> bytes:
        values, dropped = flatten_metrics(item.payload)
        if dropped:
            self.stats.dropped_values += len(dropped)
            fresh = {k: why for k, why in dropped.items() if k not in self._warned_keys}
            if fresh:
                self._warned_keys.update(fresh)
                logger.warning(
                    "openruns: dropped metric values that are not finite numbers: %s "
                    "(each key is named once)",
                    ", ".join(f"{k} ({why})" for k, why in fresh.items()),
                )
        return encode_metrics_row(item.step, item.ts, values)

    def _add_record(self, builder: BatchBuilder, record: Any, step: int | None) -> None:
        try:
            mapping = stamp_run(to_mapping(record), self._run_id, self._run_type)
            if step is not None and record_step(mapping, None) is None:
                # The step came from the log call: write it down, so the line alone says it.
                mapping["step"] = step
            row = index_fields(mapping, None)
            line = encode_record(mapping)
        except Exception as exc:
            self.stats.count_failed("encode", 1, exc, f"encoding a {builder.stream[:-1]}")
            return
        self._hand_on(builder.add(line, row))

    def _hand_on(self, batch: Batch | None) -> None:
        if batch is not None:
            self._handoff.put(batch)

    # -- sink thread --------------------------------------------------------------------------

    def _sink_loop(self) -> None:
        sink = self._sink
        assert sink is not None
        while True:
            work = self._handoff.get()
            if isinstance(work, Batch):
                try:
                    sink.write(work)
                    self.stats.count_written(work.stream, work.count)
                except Exception as exc:
                    self.stats.count_failed(sink.name, work.count, exc, f"writing to {sink.name}")
                continue
            try:
                sink.close() if work is _STOP else sink.flush()
            except Exception as exc:
                action = "closing" if work is _STOP else "flushing"
                self.stats.record_error(f"{action} {sink.name}", exc)
            if work is _STOP:
                return
            work.set()


def metrics_item(values: Mapping[str, Any], step: int, ts: float) -> Item:
    return Item("metrics", values, 1, step, ts)
