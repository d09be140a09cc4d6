"""
One monitor on its own thread, fed through a bounded queue.

The producer's side (`put`) is an append under a lock, so a log() call costs the event loop
microseconds; setup, encoding, compression, file and network I/O all run on the worker thread.
The queue is bounded twice: by episodes (MAX_PENDING_EPISODES), because it holds references to
the producer's episodes, tens of MB each; and by metrics rows (MAX_PENDING_ROWS, small), so
that a monitor still setting up (wandb.init takes seconds) never holds up a trainer's metrics.
When a bound is reached, put() waits for room without blocking the loop (short async sleeps),
up to PUT_TIMEOUT_SECONDS; then the call's records are dropped for this monitor only, counted
and named in a warning. A call larger than the bound is accepted when none of its kind is
queued, so no call can wait forever.

Nothing here uses the caller's event loop between calls, so a producer may log from
`asyncio.run(...)` per call (as synchronous trainers do) without losing queued work.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from .base import Monitor, PartialFailure

__all__ = ["MonitorStats", "MonitorWorker"]

logger = logging.getLogger("openruns.monitors")

MAX_PENDING_EPISODES = 32
MAX_PENDING_ROWS = 10_000
PUT_TIMEOUT_SECONDS = 5.0
_FINALIZE = object()
# Queued calls; episodes are bounded by MAX_PENDING_EPISODES, the others (small rows) by rows.
_METHODS = ("log_episodes", "log_metrics", "log_annotations")


@dataclass
class MonitorStats:
    """What happened to the records given to one monitor."""

    logged: int = 0  # records handled without error
    failed: int = 0  # records of calls that raised
    dropped: int = 0  # records never handled: queue full past the timeout, or monitor disabled
    errors: list[str] = field(default_factory=list)


@dataclass
class _Call:
    method: str
    args: tuple[Any, ...]
    count: int


class MonitorWorker:
    def __init__(self, monitor: Monitor):
        self.monitor = monitor
        self.name = monitor.name
        self.stats = MonitorStats()
        self._items: collections.deque[Any] = collections.deque()
        self._pending = dict.fromkeys(_METHODS, 0)
        self._cond = threading.Condition()
        self._broken = False
        self._closing = False
        self._warned_full = False
        self._done: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=self._loop, name=f"openruns-monitor-{self.name}", daemon=True
        )
        self._thread.start()

    # -- producer side ------------------------------------------------------------------------

    async def put(self, method: str, args: tuple[Any, ...], count: int) -> None:
        """Queue one call; wait (asynchronously) for room; drop and count after the timeout."""
        call = _Call(method, args, count)
        if self._try_put(call):
            return
        deadline = time.monotonic() + PUT_TIMEOUT_SECONDS
        delay = 0.001
        while time.monotonic() < deadline:
            await asyncio.sleep(delay)
            if self._try_put(call):
                return
            delay = min(delay * 2, 0.02)
        self._drop(call, f"its queue stayed full for {PUT_TIMEOUT_SECONDS:g} s")

    def _try_put(self, call: _Call) -> bool:
        with self._cond:
            if self._broken:
                self.stats.dropped += call.count
                return True
            pending = self._pending[call.method]
            bound = MAX_PENDING_EPISODES if call.method == "log_episodes" else MAX_PENDING_ROWS
            if pending and pending + call.count > bound:
                return False
            self._items.append(call)
            self._pending[call.method] = pending + call.count
            self._cond.notify()
            return True

    def _drop(self, call: _Call, why: str) -> None:
        with self._cond:
            self.stats.dropped += call.count
            first = not self._warned_full
            self._warned_full = True
        if first:
            logger.warning(
                "openruns monitors: %s monitor dropped %d record(s) because %s; further drops "
                "are counted in Monitors.stats without a warning",
                self.name,
                call.count,
                why,
            )

    def close(self) -> concurrent.futures.Future[None]:
        """Queue finalize() after everything logged; the future completes when it has run."""
        with self._cond:
            if not self._closing:
                self._closing = True
                self._items.append(_FINALIZE)
                self._cond.notify()
        return self._done

    # -- worker thread ------------------------------------------------------------------------

    def _loop(self) -> None:
        try:
            self.monitor.setup()
        except Exception as exc:
            self._report("set up", exc)
            with self._cond:
                self._broken = True
                dropped = sum(i.count for i in self._items if isinstance(i, _Call))
                self.stats.dropped += dropped
                self._items = collections.deque(i for i in self._items if i is _FINALIZE)
                self._pending = dict.fromkeys(_METHODS, 0)
            logger.warning("openruns monitors: %s monitor is disabled", self.name)
        while True:
            with self._cond:
                while not self._items:
                    self._cond.wait()
                item = self._items.popleft()
            if item is _FINALIZE:
                if not self._broken:
                    try:
                        self.monitor.finalize()
                    except Exception as exc:
                        self._report("finalize", exc)
                self._done.set_result(None)
                return
            failed = 0
            try:
                getattr(self.monitor, item.method)(*item.args)
            except PartialFailure as exc:
                self._report(item.method.replace("_", " "), exc)
                failed = min(exc.failed, item.count)
            except Exception as exc:
                self._report(item.method.replace("_", " "), exc)
                failed = item.count
            with self._cond:
                self._pending[item.method] -= item.count
                self.stats.logged += item.count - failed
                self.stats.failed += failed

    def _report(self, what: str, exc: BaseException) -> None:
        message = f"{self.name} monitor failed to {what}: {type(exc).__name__}: {exc}"
        if message not in self.stats.errors:  # one line per distinct failure
            self.stats.errors.append(message)
            logger.warning("openruns monitors: %s", message, exc_info=exc)
