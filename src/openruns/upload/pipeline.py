"""
The upload pipeline of one run in one process. Two lanes, so that metrics never wait behind
episodes (a step's metrics are visible while its multi-MB rollouts still encode):

    log_metrics()     --> "metrics": queue --> encoder thread --> handoff --> sink thread --+
    log_annotations()
    console lines (put_logs)
    log_episodes()    --> "records": queue --> encoder thread --> handoff --> sink thread --+-> Sink
    log_traces()                     (refs)    to_mapping, stamp,  (pieces,   compress each
                                               orjson in pieces,   bounded    frame, complete
                                               cut frames/batches  in bytes)  batches, write/send

Within a lane, work is split over two threads because encoding holds the GIL while zstd (and
the network) release it: the encoder cuts the next frame while the sink thread compresses the
last one. Memory is bounded in bytes, not records: the handoff holds at most HANDOFF_BYTES of
encoded pieces per lane (the encoder waits beyond), and the sink bounds the compressed batches
it holds. A record is never held whole, encoded: it streams through in frame-sized pieces.

Threads sleep on their queue or a deadline, never on a poll: the encoder wakes when records
arrive (metric rows: when WAKE_AT_RECORDS wait or when the oldest is MAX_BATCH_AGE old), the
sink thread when a frame is handed on. The sink does the accounting (Stats): every accepted
record ends up written, spooled, failed or dropped, and close() counts what its deadline left.

Console lines (console.py) ride the metrics lane as the `logs` stream, like annotations, but are
admitted by a budget of their own (`put_logs`): at most LOG_HELD_BYTES of them wait to be
encoded, and at most a quarter of the queue's records, so a flood of prints never takes the
room metric rows need. A producer that may wait (the capture's drain thread) waits for room; the
others (a launcher reading its command's pipes, which must never make the command wait) do
not. Lines still beyond the budget are refused and their characters counted
(`Stats.dropped_console_chars`), not as dropped records.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple, Protocol

from .. import fork
from ..batches import Batch
from ..records import (
    MetricsCleaner,
    index_fields,
    nonfinite_paths,
    record_step,
    stamp_run,
    to_mapping,
)
from ..rundir import ROW_STREAMS
from .batching import BatchAssembler, FrameCutter, FrameInput
from .encoder import Coercer, Piece, encode_metrics_row, encode_row, iter_pieces, yield_gil
from .queue import ByteQueue, Item, RecordQueue
from .stats import Stats

__all__ = ["LogLines", "Pipeline", "Sink"]

logger = logging.getLogger("openruns")

# A batch is handed on when its oldest line is this old even if not full, so readers see data
# within about a second.
MAX_BATCH_AGE = 1.0
JOIN_SLICE = 0.1  # close's wait for the lanes looks again at its deadline this often
# Lines per batch (the upload unit): ~5 MB compressed, a request every ~0.1 s at full speed.
BATCH_BYTES = 16 * 1024 * 1024
HANDOFF_BYTES = {"metrics": 1024 * 1024, "records": 8 * 1024 * 1024}
# Metric rows, annotations and console lines are small rows that must not wait behind episodes.
LANES = {"metrics": ROW_STREAMS, "records": ("episodes", "traces")}
# Console lines waiting to be encoded, by what they hold: their characters plus a line's own
# cost (its dict and strings, roughly LOG_LINE_COST bytes).
LOG_HELD_BYTES = 4 * 1024 * 1024
LOG_LINE_COST = 256


class LogLines(NamedTuple):
    """The payload of a `logs` item: line records and what they cost in the budget."""

    rows: list[dict[str, Any]]
    cost: int


class Sink(Protocol):
    """
    A destination of encoded batches. Each lane calls it from its own sink thread with its own
    streams only; the sink counts outcomes in the Stats it was made with.
    """

    name: str

    def write(self, batch: Batch) -> None: ...  # raising fails the whole batch
    def closing(self, deadline: float | None) -> None: ...  # close() is coming: stop waiting
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
        # Console producers and the metrics encoder only (never a log_* call).
        self._log_room = threading.Condition(threading.Lock())
        self._log_held = 0  # cost of the console lines queued and not yet encoded
        self._log_held_lines = 0
        self._coercer = Coercer(self.stats.converted)
        self._named_nonfinite: set[str] = set()
        # Rows the encoder adds itself (the NaN reports of nonfinite_lines), accounted as if
        # accepted: the sink counts them written like any other row.
        self._reports = 0
        self._lanes = {name: _Lane(self, name, streams) for name, streams in LANES.items()}
        self._start_lock = threading.Lock()
        self._started = False
        self._closed = False
        self._hurried_by: float | None = None  # a signal's deadline for the close (hurry)
        self._sink: Sink | None = None

    @property
    def sink(self) -> Sink | None:
        return self._sink

    # -- producer side: cheap, never blocking -------------------------------------------------

    def put(self, kind: str, payload: Any, count: int, step: int | None, ts: float) -> bool:
        """Queue one log_* call: `payload` is a metrics dict (kind metrics), a list of records
        (episodes, traces, annotations) or LogLines (logs, through put_logs); False when it
        was refused (counted as dropped)."""
        if not self._started:
            self._start()  # a forked child starts its threads on first use
        lane = self._lanes["metrics" if kind in ROW_STREAMS else "records"]
        return lane.queue.put(kind, payload, count, step, ts)

    def put_logs(
        self, rows: list[dict[str, Any]], *, wait: float = 0.0, budgeted: bool = True
    ) -> bool:
        """
        Queue console line records (`{"ts", "stream", "source", "line"}`) on the metrics lane,
        within the console budget (see the module docstring): the lines that fit go, oldest
        first; for the rest the call waits up to `wait` seconds for the encoder to free room
        (0: never blocks; a producer whose own caller must not wait passes 0), then refuses them
        and counts their characters in `stats.dropped_console_chars`. `budgeted=False` (a
        traceback, the note of what was dropped: one record that must not lose to a flood)
        skips the budget. False when any line was refused, or the pipeline is closed.
        """
        if self._closed or not rows:
            return False
        if not budgeted:  # the lifecycle's lines: queued as a barrier is (see upload/queue.py)
            if not self._started:
                self._start()
            self._lanes["metrics"].queue.put_control(
                Item("logs", LogLines(rows, 0), len(rows), None, time.time())
            )
            return True
        deadline = time.monotonic() + wait
        while rows:
            fit, cost = self._take_log_budget(rows, deadline)
            if not fit:
                break
            if not self._queue_logs(LogLines(rows[:fit], cost)):
                return False  # the queue itself is full: counted as dropped records
            rows = rows[fit:]
        if rows:
            self.stats.count_dropped_console_chars(sum(len(row.get("line") or "") for row in rows))
        return not rows

    def _queue_logs(self, lines: LogLines) -> bool:
        if self.put("logs", lines, len(lines.rows), None, time.time()):
            return True
        self.logs_encoded(lines)  # refused by the queue (counted there as dropped records)
        return False

    def _take_log_budget(self, rows: list[dict[str, Any]], deadline: float) -> tuple[int, int]:
        """(how many of the first rows fit in the console budget, their cost), taken; waits
        until at least one fits or `deadline` (time.monotonic()) passes."""
        with self._log_room:
            while True:
                room = LOG_HELD_BYTES - self._log_held
                room_lines = max(1, self._max_records // 4) - self._log_held_lines
                fit = cost = 0
                for row in rows:
                    row_cost = len(row.get("line") or "") + LOG_LINE_COST
                    if fit >= room_lines or cost + row_cost > room:
                        break
                    fit += 1
                    cost += row_cost
                left = deadline - time.monotonic()
                if fit or left <= 0 or self._closed:
                    break
                self._log_room.wait(left)
            self._log_held += cost
            self._log_held_lines += fit
        return fit, cost

    def logs_encoded(self, lines: LogLines) -> None:
        """Console lines left the queue: their cost is free for the next ones."""
        if lines.cost:  # budgeted lines (the others cost nothing)
            with self._log_room:
                self._log_held -= lines.cost
                self._log_held_lines -= len(lines.rows)
                self._log_room.notify_all()

    @property
    def dropped(self) -> int:
        return sum(lane.queue.dropped for lane in self._lanes.values()) + self.stats.dropped

    @property
    def accepted(self) -> int:
        return sum(lane.queue.accepted for lane in self._lanes.values()) + self._reports

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the threads (from init(): a run's setup, where waiting is expected)."""
        self._start()
        # The objects init() just made (the run, its backend, threads, lazily imported modules)
        # are young: left there, the collector's first pass over them would run inside a
        # log_* call (~0.4 ms here). Moved on now, in init(), they cost log_* nothing.
        gc.collect(1)

    def _start(self) -> None:
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

    def hurry(self, deadline: float) -> None:
        """A close under way (or to come) ends by `deadline` (time.monotonic()): the sink
        spools what it has not sent a little before, as close does at its own deadline."""
        self._hurried_by = deadline if self._hurried_by is None else min(deadline, self._hurried_by)
        if self._sink is not None:
            self._sink.closing(deadline - min(2.0, 0.2 * max(0.0, deadline - time.monotonic())))

    def close(self, timeout: float | None) -> bool:
        """Drain and stop within `timeout`; what is left is counted as dropped. Idempotent."""
        if self._closed:
            return True
        self._closed = True
        with self._log_room:
            self._log_room.notify_all()  # a console producer waiting for room gives up
        if not self._started:
            return True
        deadline: float | None = None
        sink_deadline: float | None = None
        if timeout is not None:
            deadline = time.monotonic() + timeout
            # The sink must be done (its leftovers spooled) a little before the threads are
            # given up.
            sink_deadline = deadline - min(2.0, 0.2 * timeout)
        if self._sink is not None:
            self._sink.closing(sink_deadline)
        for lane in self._lanes.values():
            lane.queue.put_control(Item("barrier", _Stop(sink_deadline), 0, None, 0.0))
        for lane in self._lanes.values():
            lane.join(lambda: _earlier(deadline, self._hurried_by))
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

    def nonfinite_lines(self, item: Item) -> list[list[Piece]]:
        """The `alerts` rows reporting the metrics the last metrics_line dropped as NaN or
        infinite for the first time (the server's nonfinite rules read them)."""
        fresh = self._cleaner.fresh_nonfinite
        self._reports += len(fresh)
        return [
            encode_row(
                {"type": "nonfinite", "metric": k, "value": v, "step": item.step, "ts": item.ts}
            )
            for k, v in fresh
        ]

    def row_line(self, kind: str, row: Mapping[str, Any], ts: float) -> list[Piece] | None:
        """An annotation, a console line or an alert, with the time it was logged unless it
        has one."""
        try:
            return encode_row(row if "ts" in row else {**row, "ts": ts})
        except Exception as exc:
            what = {"annotations": "an annotation", "alerts": "an alert"}.get(
                kind, "a console line"
            )
            self.stats.count_failed("encode", 1, exc, f"encoding {what}")
            return None

    def record_line(self, stream: str, record: Any, step: int | None) -> Any:
        """(the record's pieces, lazily encoded, and its index row), or None when the record
        cannot be read (counted failed). Encoding itself never fails: see Coercer."""
        try:
            mapping = stamp_run(to_mapping(record), self._run_id, self._run_type)
            if step is not None and record_step(mapping, None) is None:
                # The step came from the log call: write it down, so the line alone says it.
                mapping["step"] = step
            row = index_fields(mapping, None)  # its kind falls back to the stamped run type
            self._check_finite(mapping)
        except Exception as exc:
            self.stats.count_failed("encode", 1, exc, f"encoding a {stream[:-1]}")
            return None
        return iter_pieces(mapping, self._coercer), row

    def _check_finite(self, record: Mapping[str, Any]) -> None:
        paths = nonfinite_paths(record)
        if not paths:
            return
        self.stats.count_converted("non-finite number as null", len(paths))
        fresh = [p for p in dict.fromkeys(paths) if p not in self._named_nonfinite]
        if fresh:
            self._named_nonfinite.update(fresh)
            logger.warning(
                "openruns: records hold NaN or infinite numbers, which JSON cannot hold; "
                "stored as null: %s (each field is named once; counted in the run's losses "
                "as converted_values)",
                ", ".join(fresh),
            )


class _Lane:
    """One queue, one encoder thread, one sink thread, for a fixed set of streams."""

    def __init__(self, pipeline: Pipeline, name: str, streams: tuple[str, ...]):
        self.pipeline = pipeline
        self.name = name
        self.streams = streams
        self.queue = RecordQueue(pipeline._max_records)
        self.handoff = ByteQueue(HANDOFF_BYTES[name])
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

    def join(self, deadline: Callable[[], float | None]) -> None:
        """Wait for the threads until `deadline()`, asked again every JOIN_SLICE: a signal
        during the wait may bring it nearer (Pipeline.hurry)."""
        for thread in self.threads:
            while thread.is_alive():
                left = _remaining(deadline())
                if left == 0.0:
                    break
                thread.join(JOIN_SLICE if left is None else min(JOIN_SLICE, left))
        self.stopped = not any(t.is_alive() for t in self.threads)

    def _encode_loop(self) -> None:
        pipeline = self.pipeline
        cutters = {s: FrameCutter(s, pipeline._batch_bytes) for s in self.streams}
        while True:
            self.queue.wait(_until_oldest_is_due(cutters.values()))
            for item in self.queue.take_all():
                if item.kind == "barrier":
                    for cutter in cutters.values():
                        self._hand_on(cutter.cut())
                    self.handoff.put(item.payload)
                    if isinstance(item.payload, _Stop):
                        return
                    continue
                cutter = cutters[item.kind]
                if item.kind == "metrics":
                    for work in cutter.add(pipeline.metrics_line(item), None):
                        self._hand_on(work)
                    for report in pipeline.nonfinite_lines(item):
                        for work in cutters["alerts"].add(report, None):
                            self._hand_on(work)
                    yield_gil()
                    continue
                if item.kind in ("annotations", "logs", "alerts"):
                    logs = item.payload if item.kind == "logs" else None
                    for row in item.payload if logs is None else logs.rows:
                        line = pipeline.row_line(item.kind, row, item.ts)
                        if line is not None:
                            for work in cutter.add(line, None):
                                self._hand_on(work)
                    if logs is not None:
                        pipeline.logs_encoded(logs)
                    yield_gil()
                    continue
                for record in item.payload:
                    encoded = pipeline.record_line(item.kind, record, item.step)
                    if encoded is not None:
                        try:
                            for work in cutter.add(*encoded):
                                self._hand_on(work)
                        except Exception as exc:  # the record could not be encoded after all
                            what = f"encoding a {item.kind[:-1]}"
                            pipeline.stats.count_failed("encode", 1, exc, what)
                    yield_gil()
            now = time.monotonic()
            for cutter in cutters.values():
                since = cutter.pending_since
                if since is not None and now - since >= MAX_BATCH_AGE:
                    self._hand_on(cutter.cut())

    def _hand_on(self, work: FrameInput | None) -> None:
        if work is not None:
            self.handoff.put(work, work.size)

    def _sink_loop(self, sink: Sink) -> None:
        stats = self.pipeline.stats
        assemblers = {s: BatchAssembler(s) for s in self.streams}
        while True:
            work = self.handoff.get()
            if isinstance(work, FrameInput):
                batch = assemblers[work.stream].add(work)
                if batch is not None:
                    try:
                        sink.write(batch)
                    except Exception as exc:
                        stats.count_failed(sink.name, batch.records, exc, f"writing to {sink.name}")
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


def _until_oldest_is_due(cutters: Iterable[FrameCutter]) -> float | None:
    """Seconds until the oldest line held by a cutter is MAX_BATCH_AGE old (None: none held)."""
    times = [c.pending_since for c in cutters if c.pending_since is not None]
    if not times:
        return None
    return max(0.0, min(times) + MAX_BATCH_AGE - time.monotonic())


def _earlier(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())
