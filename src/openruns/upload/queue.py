"""
The bounded, never-blocking queue between log_* calls and the encoder thread.

Producers append whole calls (a list of references, or one metrics row) with `put()`, which
never waits: when the records queued would exceed the bound, the call's records are refused and
counted in `dropped`, and one warning is logged per burst of refusals. The encoder thread takes
everything queued with `take_all()`. The lock guards only counters and a deque append, never
I/O, and no lifecycle path takes it, so a signal handler that interrupts a put cannot deadlock.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import Any, NamedTuple

__all__ = ["Item", "RecordQueue"]

logger = logging.getLogger("openruns")

# Wake the encoder at once for episode/trace calls (they are big and worth starting early), and
# for metrics only when this many rows wait; otherwise it wakes on its own poll interval.
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
            if (item.kind != "metrics" or queued >= WAKE_AT_RECORDS) and not self.wakeup.is_set():
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
