"""
The upload pipeline of one run in one process. Two lanes, so that metrics never wait behind
episodes (a step's metrics are visible while its multi-MB rollouts still encode):

    log_metrics()     --> "metrics": queue --> encoder thread --> handoff --> sink thread --+
    log_annotations()
    log_episodes()    --> "records": queue --> encoder thread --> handoff --> sink thread --+-> Sink
    log_traces()                     (refs)    to_mapping, stamp,  (batches)  compress,
                                               orjson, batch                  write / send

Within a lane, work is split over two threads because encoding holds the GIL while zstd (and
the network) release it: the encoder builds the next batch while the sink thread compresses and
writes or sends the last one. The sink does the accounting (Stats): every accepted record ends
up written, spooled, failed or dropped, and close() counts what its deadline left behind.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ..records import MetricsCleaner, index_fields, record_step, stamp_run, to_mapping
from ..rundir import ROW_STREAMS
from . import fork
from .encoder import (
    Batch,
    BatchBuilder,
    Piece,
    encode_metrics_row,
    encode_record,
    encode_row,
    yield_gil,
)
from .queue import Item, RecordQueue
from .stats import Stats

__all__ = ["Pipeline", "Sink", "metrics_item"]

logger = logging.getLogger("openruns")

POLL_SECONDS = 0.2
# A batch is handed on when it is this old even if not full, so readers see data within ~1 s.
MAX_BATCH_AGE = 1.0
HANDOFF_BATCHES = 2
BATCH_BYTES = 8 * 1024 * 1024
LANES = {"metrics": ROW_STREAMS, "records": ("episodes", "traces")}


class Sink(Protocol):
    """
    A destination of encoded batches. Each lane calls it from its own sink thread with its own
    streams only; the sink counts outcomes in the Stats it was made with.
    """

    name: str

    def write(self, batch: Batch) -> None: ...  # raising fails the whole batch
    def flush(self, streams: tuple[str, ...], deadline: float | None) -> None: ...
    def close(self, streams: tuple[str, ...], deadline: float | None) -> None: ...
    def drop(self) -> None: ...  # after fork: forget inherited descriptors, never flush them


class _Stop:
    def __init__(self, deadline: float | None):
        self.deadline = deadline


class _Barrier:
    def __init__(self, deadline: float | None):
        self.deadline = deadline
        self.done = threading.Event()


class Pipeline:
    def __init__(
        self,
        make_sink: Callable[[Stats], Sink],
        run_id: str,
        run_type: str,
        max_queued_records: int,
        batch_bytes: int | None = None,
    ):
        self._make_sink = make_sink
        self._run_id = run_id
        self._run_type = run_type
        self._batch_bytes = batch_bytes or BATCH_BYTES
        self._max_records = max_queued_records
        self._cleaner = MetricsCleaner()
        self._reset()
        fork.register(self)

    def _reset(self) -> None:
        self.stats = Stats()
        self._lanes = {name: _Lane(self, name, streams) for name, streams in LANES.items()}
        self._start_lock = threading.Lock()
        self._started = False
        self._closed = False
        self._sink: Sink | None = None

    @property
    def sink(self) -> Sink | None:
        return self._sink

    # -- producer side: cheap, never blocking -------------------------------------------------

    def put(self, item: Item) -> bool:
        if not self._started:
            self.start()  # a forked child starts its threads on first use
        lane = self._lanes["metrics" if item.kind in ROW_STREAMS else "records"]
        return lane.queue.put(item)

    @property
    def dropped(self) -> int:
        return sum(lane.queue.dropped for lane in self._lanes.values()) + self.stats.dropped

    @property
    def accepted(self) -> int:
        return sum(lane.queue.accepted for lane in self._lanes.values())

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        with self._start_lock:
            if self._started:
                return
            self._sink = self._make_sink(self.stats)
            for lane in self._lanes.values():
                lane.start(self._sink)
            self._started = True

    def flush(self, timeout: float | None) -> bool:
        """Barrier: True when everything put before it is written, spooled or counted failed."""
        if not self._started:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        barriers = [_Barrier(deadline) for _ in self._lanes]
        for lane, barrier in zip(self._lanes.values(), barriers, strict=True):
            lane.queue.put_control(Item("barrier", barrier, 0, None, 0.0))
        return all(b.done.wait(_remaining(deadline)) for b in barriers)

    def close(self, timeout: float | None) -> bool:
        """Drain and stop within `timeout`; what is left is counted as dropped. Idempotent."""
        if self._closed:
            return True
        self._closed = True
        if not self._started:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        # The sink must be done (its leftovers spooled) a little before the threads are given up.
        sink_deadline = None if timeout is None else deadline - min(2.0, 0.2 * timeout)
        for lane in self._lanes.values():
            lane.queue.put_control(Item("barrier", _Stop(sink_deadline), 0, None, 0.0))
        for lane in self._lanes.values():
            lane.join(deadline)
        if all(lane.stopped for lane in self._lanes.values()):
            return True
        unsent = max(0, self.accepted - self.stats.settled())
        self.stats.count_dropped(unsent)
        logger.warning(
            "openruns: uploads did not drain within %.1f s; %d records were not written "
            "(counted in run.dropped_records)",
            timeout or 0.0,
            unsent,
        )
        return False

    def _after_fork_in_child(self) -> None:
        # The parent writes everything it queued; the child starts empty, with its own threads
        # and its own sink (new writer id), and drops the parent's descriptors unflushed.
        sink = self._sink
        self._reset()
        if sink is not None:
            sink.drop()

    # -- encoding (encoder threads) -----------------------------------------------------------

    def metrics_line(self, item: Item) -> list[Piece]:
        values = self._cleaner.clean(item.payload)
        self.stats.dropped_values = self._cleaner.dropped_values
        return encode_metrics_row(item.step, item.ts, values)

    def annotation_line(self, annotation: Mapping[str, Any], ts: float) -> list[Piece] | None:
        try:
            row = annotation if "ts" in annotation else {**annotation, "ts": ts}
            return encode_row(row)
        except Exception as exc:
            self.stats.count_failed("encode", 1, exc, "encoding an annotation")
            return None

    def record_line(
        self, stream: str, record: Any, step: int | None
    ) -> tuple[list[Piece], dict[str, Any]] | None:
        try:
            mapping = stamp_run(to_mapping(record), self._run_id, self._run_type)
            if step is not None and record_step(mapping, None) is None:
                # The step came from the log call: write it down, so the line alone says it.
                mapping["step"] = step
            row = index_fields(mapping, None)
            return encode_record(mapping), row
        except Exception as exc:
            self.stats.count_failed("encode", 1, exc, f"encoding a {stream[:-1]}")
            return None


class _Lane:
    """One queue, one encoder thread, one sink thread, for a fixed set of streams."""

    def __init__(self, pipeline: Pipeline, name: str, streams: tuple[str, ...]):
        self.pipeline = pipeline
        self.name = name
        self.streams = streams
        self.queue = RecordQueue(pipeline._max_records)
        self.handoff: queue.Queue[Any] = queue.Queue(HANDOFF_BATCHES)
        self.threads: list[threading.Thread] = []
        self.stopped = False

    def start(self, sink: Sink) -> None:
        self.threads = [
            threading.Thread(
                target=self._encode_loop, name=f"openruns-{self.name}-encoder", daemon=True
            ),
            threading.Thread(
                target=self._sink_loop, args=(sink,), name=f"openruns-{self.name}-sink", daemon=True
            ),
        ]
        for thread in self.threads:
            thread.start()

    def join(self, deadline: float | None) -> None:
        for thread in self.threads:
            thread.join(_remaining(deadline))
        self.stopped = not any(t.is_alive() for t in self.threads)

    def _encode_loop(self) -> None:
        pipeline = self.pipeline
        builders = {s: BatchBuilder(s, pipeline._batch_bytes) for s in self.streams}
        wakeup = self.queue.wakeup
        while True:
            wakeup.wait(POLL_SECONDS)
            wakeup.clear()
            for item in self.queue.take_all():
                if item.kind == "barrier":
                    for builder in builders.values():
                        self._hand_on(builder.take())
                    self.handoff.put(item.payload)
                    if isinstance(item.payload, _Stop):
                        return
                    continue
                builder = builders[item.kind]
                if item.kind == "metrics":
                    self._hand_on(builder.add(pipeline.metrics_line(item)))
                    yield_gil()
                    continue
                if item.kind == "annotations":
                    for annotation in item.payload:
                        line = pipeline.annotation_line(annotation, item.ts)
                        if line is not None:
                            self._hand_on(builder.add(line))
                    yield_gil()
                    continue
                for record in item.payload:
                    encoded = pipeline.record_line(item.kind, record, item.step)
                    if encoded is not None:
                        self._hand_on(builder.add(*encoded))
                    yield_gil()
            for builder in builders.values():
                if builder.age() >= MAX_BATCH_AGE:
                    self._hand_on(builder.take())

    def _hand_on(self, batch: Batch | None) -> None:
        if batch is not None:
            self.handoff.put(batch)

    def _sink_loop(self, sink: Sink) -> None:
        stats = self.pipeline.stats
        while True:
            work = self.handoff.get()
            if isinstance(work, Batch):
                try:
                    sink.write(work)
                except Exception as exc:
                    stats.count_failed(sink.name, work.count, exc, f"writing to {sink.name}")
                continue
            stop = isinstance(work, _Stop)
            try:
                if stop:
                    sink.close(self.streams, work.deadline)
                else:
                    sink.flush(self.streams, work.deadline)
            except Exception as exc:
                stats.record_error(f"{'closing' if stop else 'flushing'} {sink.name}", exc)
            if stop:
                return
            work.done.set()


def metrics_item(values: Mapping[str, Any], step: int, ts: float) -> Item:
    return Item("metrics", values, 1, step, ts)


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())
