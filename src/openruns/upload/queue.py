"""
The queues of a lane: the record queue between log_* calls and the encoder thread, and the
handoff between the encoder and the sink thread.

`RecordQueue`: producers append whole calls (a list of references, or one metrics row) with
`put()`, which never waits: when the records queued would exceed the bound, the call's records
are refused and counted in `dropped`, and one warning is logged per burst of refusals. The
bound is in records because the queue holds references to the caller's objects, which cost
nothing here until encoded. The lock guards only counters and a deque append, never I/O, and no
lifecycle path takes it, so a signal handler that interrupts a put cannot deadlock. The encoder
sleeps in `wait()` until a deadline of its own, and a put wakes it only when it matters: the
encoder is idle, an episode or trace call arrived, or WAKE_AT_RECORDS metric rows are waiting.

`ByteQueue`: a blocking FIFO bounded by the bytes of what it holds (encoded pieces), so the
encoder waits when compression falls behind, whatever the size of the records.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import Any, NamedTuple

__all__ = ["ByteQueue", "Item", "RecordQueue"]

logger = logging.getLogger("openruns")

# Metric rows wake a busy encoder once this many wait; otherwise it takes them at its deadline.
WAKE_AT_RECORDS = 1024


class Item(NamedTuple):
    """One log_* call. kind: metrics | episodes | traces | barrier."""

    kind: str
    payload: Any
    count: int
    step: int | None
    ts: float


class RecordQueue:
    def __init__(self, max_records: int):
        self.max_records = max_records
        self.wakeup = threading.Event()
        self.dropped = 0
        self._items: collections.deque[Item] = collections.deque()
        self._lock = threading.Lock()  # producers only
        self._accepted = 0  # written under _lock by producers
        self._taken = 0  # written by the encoder thread only, which never takes _lock
        self._in_burst = False
        self._idle = False  # the encoder sleeps with no deadline: any put must wake it

    def put(self, item: Item) -> bool:
        """Queue `item`, or refuse it (counted) when the bound would be passed. Never blocks."""
        with self._lock:
            queued = self._accepted - self._taken
            accepted = queued + item.count <= self.max_records
            if accepted:
                self._accepted += item.count
                self._items.append(item)
                first_refusal = False
            else:
                self.dropped += item.count
                first_refusal = not self._in_burst
            self._in_burst = not accepted
        if accepted:
            if self._idle or item.kind != "metrics" or queued >= WAKE_AT_RECORDS:
                self._idle = False
                self.wakeup.set()
        elif first_refusal:
            logger.warning(
                "openruns: upload queue full (%d records waiting); dropped the %d records of "
                "this call, and counts further drops until it drains (run.dropped_records)",
                queued,
                item.count,
            )
        return accepted

    def put_control(self, item: Item) -> None:
        """Queue a barrier. Bypasses the bound and the lock: lifecycle paths must never wait."""
        self._items.append(item)
        self.wakeup.set()

    def wait(self, timeout: float | None) -> None:
        """Encoder thread: sleep until woken or `timeout` seconds (None: until woken)."""
        if timeout is None:
            self._idle = True
            if self._items:  # a put between the last take and `_idle` did not wake us
                self._idle = False
                return
        self.wakeup.wait(timeout)
        self._idle = False
        self.wakeup.clear()

    def take_all(self) -> list[Item]:
        """Everything queued now, oldest first (encoder thread only)."""
        items = []
        popleft = self._items.popleft
        while True:
            try:
                items.append(popleft())
            except IndexError:
                break
        self._taken += sum(i.count for i in items if i.kind != "barrier")
        return items

    @property
    def accepted(self) -> int:
        return self._accepted


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
