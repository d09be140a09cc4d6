"""
The queues of a lane: the record queue between log_* calls and the encoder thread, and the
handoff between the encoder and the sink thread.

`RecordQueue`: producers append whole calls (a list of references, or one metrics row) with
`put()`, which never waits: when the records queued would exceed the bound, the call's records
are refused and counted in `dropped`, and one warning is logged per burst of refusals. The
bound is in records because the queue holds references to the caller's objects, which cost
nothing here until encoded. The encoder sleeps in `wait()` until a deadline of its own, and a
put wakes it only when it matters: the encoder is idle, an episode or trace call arrived, or
WAKE_AT_RECORDS metric rows are waiting.

The lifecycle (`put_control`: a flush's barrier, close's stop, a run's last log lines) runs in
a SIGTERM handler too, on top of whatever the main thread was doing: possibly a put, holding
the producers' lock, or halfway through waking the encoder. So it takes no lock a put may
hold: its items go to a deque of their own, and the wake-up is a `queue.SimpleQueue`, whose
put CPython makes reentrant (a threading.Event's set takes a lock: a handler that interrupted
one and set it again waited forever, and the launcher's SIGKILL took the run's unsent records
with it; issue 24). The encoder takes the lifecycle items queued before the calls it takes, and
hands them on after those calls, so a barrier still follows everything put before it.

`ByteQueue`: a blocking FIFO bounded by the bytes of what it holds (encoded pieces), so the
encoder waits when compression falls behind, whatever the size of the records.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
from collections.abc import Iterator
from typing import Any, NamedTuple

__all__ = ["ByteQueue", "Item", "RecordQueue"]

logger = logging.getLogger("openruns")

# Metric rows wake a busy encoder once this many wait (~12 MB of copied dicts); otherwise it
# takes them at its deadline, so a burst of log_metrics calls never hands it the GIL mid-burst.
WAKE_AT_RECORDS = 8192


class Item(NamedTuple):
    """One log_* call, as the encoder sees it. kind: metrics | episodes | traces | barrier."""

    kind: str
    payload: Any
    records: int  # how many records the call logged (`count` would hide tuple.count)
    step: int | None
    ts: float


class RecordQueue:
    def __init__(self, max_records: int):
        self.max_records = max_records
        self.dropped = 0
        # A call is two entries: (kind, count, step, ts), a tuple of untracked values, which the
        # garbage collector stops tracking at its first pass, then its payload (a metrics dict
        # of numbers is never tracked). No per-call object stays tracked while it waits, so
        # thousands of waiting rows never make the collector's passes, which the producer pays
        # for, slower. Producers append the head first, so a visible payload has its head.
        self._heads: collections.deque[tuple[str, int, int | None, float]] = collections.deque()
        self._payloads: collections.deque[Any] = collections.deque()
        self._lock = threading.Lock()  # producers only
        self._accepted = 0  # written under _lock by producers
        self._taken = 0  # written by the encoder thread only, which never takes _lock
        self._controls: collections.deque[Item] = collections.deque()  # the lifecycle's
        self._control_records = 0  # records the lifecycle queued (its log lines)
        self._wake: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._in_burst = False
        self._idle = False  # the encoder sleeps with no deadline: any put must wake it

    def put(self, kind: str, payload: Any, count: int, step: int | None, ts: float) -> bool:
        """Queue one call (an Item's fields), or refuse it (counted) when the bound would be
        passed. Never blocks."""
        with self._lock:
            queued = self._accepted - self._taken
            accepted = queued + count <= self.max_records
            if accepted:
                self._accepted += count
                self._heads.append((kind, count, step, ts))
                self._payloads.append(payload)
                first_refusal = False
            else:
                self.dropped += count
                first_refusal = not self._in_burst
            self._in_burst = not accepted
        if accepted:
            if self._idle or kind != "metrics" or queued >= WAKE_AT_RECORDS:
                self._idle = False
                self._wake.put(None)
        elif first_refusal:
            logger.warning(
                "openruns: upload queue full (%d records waiting); dropped the %d records of "
                "this call, and counts further drops until it drains (run.dropped_records)",
                queued,
                count,
            )
        return accepted

    def put_control(self, item: Item) -> None:
        """Queue a lifecycle item: a barrier (kind "barrier", no records) or records that must
        not be refused (a run's last log lines). Bypasses the bound and takes no lock: see the
        module docstring."""
        self._control_records += item.records
        self._controls.append(item)
        self._wake.put(None)

    def wait(self, timeout: float | None) -> None:
        """Encoder thread: sleep until woken or `timeout` seconds (None: until woken)."""
        if timeout is None:
            self._idle = True
            if self._payloads or self._controls:  # a put since the last take did not wake us
                self._idle = False
                return
        try:
            self._wake.get(timeout=timeout)
        except queue.Empty:
            pass
        self._idle = False
        while True:  # the wakes of the puts it is about to take
            try:
                self._wake.get_nowait()
            except queue.Empty:
                break

    def take_all(self) -> Iterator[Item]:
        """What is queued now, oldest first, one at a time (encoder thread only): each Item
        lives only while it is encoded; then the lifecycle items queued before this take."""
        controls = [self._controls.popleft() for _ in range(len(self._controls))]
        heads, payloads = self._heads.popleft, self._payloads.popleft
        for _ in range(len(self._payloads)):
            kind, count, step, ts = heads()
            self._taken += count
            yield Item(kind, payloads(), count, step, ts)
        yield from controls

    @property
    def accepted(self) -> int:
        return self._accepted + self._control_records


class ByteQueue:
    """A FIFO between two threads that holds at most `max_bytes` (one item may be bigger)."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.held = 0
        self._items: collections.deque[tuple[Any, int]] = collections.deque()
        self._cond = threading.Condition(threading.Lock())

    def put(self, item: Any, nbytes: int = 0) -> None:
        """Append; waits while the queue is not empty and `nbytes` more would pass the bound."""
        with self._cond:
            while self.held and self.held + nbytes > self.max_bytes:
                self._cond.wait()
            self._items.append((item, nbytes))
            self.held += nbytes
            self._cond.notify_all()

    def get(self) -> Any:
        with self._cond:
            while not self._items:
                self._cond.wait()
            item, nbytes = self._items.popleft()
            self.held -= nbytes
            self._cond.notify_all()
            return item
