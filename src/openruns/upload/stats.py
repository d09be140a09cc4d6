"""Loss accounting shared by the pipeline and its sinks (updated from several threads)."""

from __future__ import annotations

import logging
import threading

__all__ = ["Stats"]

logger = logging.getLogger("openruns")


class Stats:
    """
    What happened to the records one process logged to one run. Every record accepted by the
    queue ends up `written` (stored or acknowledged), `spooled` (on local disk, to be sent
    later), `failed` (by destination, or `encode` when it was not JSON-able) or `dropped`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.written: dict[str, int] = {}
        self.failed: dict[str, int] = {}
        self.dropped = 0  # refused by a full spool, or not drained before finish's deadline
        self.spooled = 0  # currently on disk waiting to be sent
        self.dropped_values = 0  # non-finite / non-numeric metric values
        # console output not kept (console.py and Pipeline.put_logs' budget), in characters
        self.dropped_console_chars = 0
        # values in records JSON cannot hold, by what they were stored as ("bytes as base64")
        self.converted: dict[str, int] = {}
        self.errors: list[str] = []
        self.first_error: BaseException | None = None
        self._seen: set[str] = set()

    def count_written(self, stream: str, n: int) -> None:
        with self._lock:
            self.written[stream] = self.written.get(stream, 0) + n

    def count_spooled(self, n: int) -> None:
        with self._lock:
            self.spooled += n

    def count_dropped(self, n: int) -> None:
        with self._lock:
            self.dropped += n

    def count_dropped_console_chars(self, n: int) -> None:
        with self._lock:
            self.dropped_console_chars += n

    def count_converted(self, what: str, n: int) -> None:
        with self._lock:
            self.converted[what] = self.converted.get(what, 0) + n

    def count_failed(self, where: str, n: int, exc: BaseException, what: str) -> None:
        with self._lock:
            self.failed[where] = self.failed.get(where, 0) + n
        self.record_error(what, exc)

    def record_error(self, what: str, exc: BaseException) -> None:
        message = f"{what} failed: {type(exc).__name__}: {exc}"
        with self._lock:
            if self.first_error is None:
                self.first_error = exc
            if message in self._seen:  # one line per distinct failure, however often it repeats
                return
            self._seen.add(message)
            self.errors.append(message)
        logger.warning("openruns: %s", message)

    def settled(self) -> int:
        """Records whose fate is known: written, failed, dropped or safely spooled."""
        with self._lock:
            return (
                sum(self.written.values()) + sum(self.failed.values()) + self.dropped + self.spooled
            )
