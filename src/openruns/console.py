"""
Console capture: what a run's processes print, as line records for the run's Logs tab.

    capture = ConsoleCapture(emit)     # emit(records): hands a list of line records on
    capture.start()                    # sys.stdout / sys.stderr become tees
    ...
    capture.stop()                     # restored; the last partial lines are emitted

A line record is `{"ts", "stream": "stdout" | "stderr" | "output" | "traceback", "source",
"line"}` (the server's POST /runs/{id}/logs line).

How, and why this way (docs/decisions.md, "Console capture"):
- In the process that owns a run, `sys.stdout` and `sys.stderr` are replaced by tees: each
  write goes to the real stream first, exactly as before (same buffering, same terminal, same
  exceptions), then its text is appended to a deque, which takes no lock and never blocks, so
  a signal handler that prints in the middle of a print cannot deadlock. A drain thread
  sleeps until the first write after it went idle wakes it (one byte on a pipe), waits
  `flush_interval` for more, then cuts the text into lines and emits them. Bounded: beyond
  `max_pending_bytes` of text not yet drained, writes are counted as dropped
  (`dropped_chars`), not kept; the run says so in one line at its end (`dropped_note`).
- After fork the child's writes still reach its own streams through the tees, and are not
  captured (the drain thread is the parent's); the child is attached to the run, not its owner.
- Not fd-level (dup2 of fds 1 and 2 onto a pipe read by a thread): in-process, a crash (a
  segfault, an abort in CUDA code, SIGKILL) would take the unread output with it, from the
  terminal too, which is exactly the output a failed run is read for. Output of C code and of
  child processes is captured where it is safe to: `openruns run` and `openruns launch` own
  their children's output from another process (`PipeTee`, `FileFollower`).
- A line ends at "\\n"; a "\\r" starts it again (progress bars keep their last state); a line
  longer than MAX_LINE_CHARS is cut there. A traceback is one record of its own
  (`traceback_record`), so the page can show it first.
"""

from __future__ import annotations

import codecs
import collections
import os
import select
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

from . import fork
from .spec import MAX_LOG_LINE_CHARS, cut_text

__all__ = [
    "MAX_LINE_CHARS",
    "ConsoleCapture",
    "FileFollower",
    "LineCutter",
    "PipeTee",
    "dropped_note",
    "traceback_record",
]

MAX_LINE_CHARS = 16_384
# What a launcher's reader holds before it hands lines on: a pipe's batch is handed on early
# once this much is read; a followed file that grew by more since the last pass is skipped to
# its last MAX_HELD_BYTES (the skipped bytes are counted and said).
MAX_HELD_BYTES = 4 * 1024 * 1024
Emit = Callable[[list[dict[str, Any]]], None]


def traceback_record(error: BaseException, source: str = "main") -> dict[str, Any]:
    """The formatted traceback of `error` as one line record of stream "traceback"."""
    text = "".join(traceback.format_exception(error)).rstrip("\n")
    # Keep the end, the frames nearest the error, within the server's line limit.
    text = cut_text(text, MAX_LOG_LINE_CHARS, keep="end")
    return {"ts": time.time(), "stream": "traceback", "source": source, "line": text}


def dropped_note(chars: int, source: str = "main") -> dict[str, Any]:
    """The line that says how much console output the run did not keep (stream "stderr")."""
    return {
        "ts": time.time(),
        "stream": "stderr",
        "source": source,
        "line": f"[openruns: {chars} characters of console output were not kept: more was "
        "printed than could wait to be sent]",
    }


class LineCutter:
    """Text of one stream in, complete lines out (see the module docstring)."""

    def __init__(self, stream: str, source: str):
        self.stream = stream
        self.source = source
        self._partial = ""
        self._since = 0.0  # when the partial line began
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def feed_bytes(self, data: bytes, ts: float) -> list[dict[str, Any]]:
        """As feed(), for bytes (a character cut between two reads is decoded whole)."""
        return self.feed(self._decoder.decode(data), ts)

    def feed(self, text: str, ts: float) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if not self._partial:
            self._since = ts
        pieces = (self._partial + text).split("\n")
        self._partial = pieces.pop()
        for piece in pieces:
            out.extend(self._records(piece, self._since))
            self._since = ts
        if "\r" in self._partial:  # keep only the last state (a "\r" before a "\n" is CRLF)
            head, _, tail = self._partial.rpartition("\r")
            self._partial = tail or head.rsplit("\r", 1)[-1] + "\r"
        while len(self._partial) > MAX_LINE_CHARS:
            out.extend(self._records(self._partial[:MAX_LINE_CHARS], self._since))
            self._partial = self._partial[MAX_LINE_CHARS:]
        return out

    def close(self) -> list[dict[str, Any]]:
        """The partial line left, as a record (at the end of the output)."""
        if not self._partial:
            return []
        rest, self._partial = self._partial, ""
        return self._records(rest, self._since)

    def _records(self, text: str, ts: float) -> list[dict[str, Any]]:
        """One line as records: its last state after a "\r", cut every MAX_LINE_CHARS."""
        text = text.rstrip("\r")
        if "\r" in text:
            text = text.rsplit("\r", 1)[1]
        return [
            {
                "ts": ts,
                "stream": self.stream,
                "source": self.source,
                "line": text[i : i + MAX_LINE_CHARS],
            }
            for i in range(0, max(len(text), 1), MAX_LINE_CHARS)
        ]


class _Tee:
    """A stream that writes to the real one, then hands the text to the capture."""

    def __init__(self, stream: IO[str], name: str, capture: ConsoleCapture):
        self._stream = stream
        self._name = name
        self._capture = capture

    def write(self, text: str) -> int:
        written = self._stream.write(text)
        self._capture._take(self._name, text)
        return written

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding, buffer, ...
        return getattr(self._stream, name)


class ConsoleCapture:
    """Tees of sys.stdout and sys.stderr into line records (see the module docstring)."""

    def __init__(
        self,
        emit: Emit,
        *,
        source: str = "main",
        flush_interval: float = 1.0,
        max_pending_bytes: int = 4 * 1024 * 1024,
    ):
        self._emit = emit
        self.source = source
        self.flush_interval = flush_interval
        self.max_pending_bytes = max_pending_bytes
        self._chunks: collections.deque[tuple[str, float, str]] = collections.deque()
        self._pending = 0  # chars appended and not drained (approximate: never locked)
        self.dropped_chars = 0
        self._cutters = {name: LineCutter(name, source) for name in ("stdout", "stderr")}
        self._tees: dict[str, _Tee] = {}
        self._originals: dict[str, Any] = {}
        self._active = False
        self._sleeping = False
        self._stopping = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._thread: threading.Thread | None = None
        fork.register(self)

    def start(self) -> None:
        import sys

        if self._active:
            return
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if stream is None:  # pythonw, some daemons: nothing to tee
                continue
            self._originals[name] = stream
            self._tees[name] = _Tee(stream, name, self)
            setattr(sys, name, self._tees[name])
        self._active = True
        self._thread = threading.Thread(target=self._loop, name="openruns-console", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Restore the streams (those still ours), emit what is left; idempotent."""
        import sys

        if not self._active:
            return
        self._active = False
        for name, tee in self._tees.items():
            if getattr(sys, name) is tee:
                setattr(sys, name, self._originals[name])
        self._stopping.set()
        self._wake()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        if self._thread is None or not self._thread.is_alive():
            self._close_pipe()

    def _close_pipe(self) -> None:
        # Once closed, the numbers may be reused by other files: never close them twice (a
        # fork after stop() must not close someone else's descriptors in the child).
        fds, self._wake_r, self._wake_w = (self._wake_r, self._wake_w), -1, -1
        for fd in fds:
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass

    # -- the write path: no lock, no blocking -------------------------------------------------

    def _take(self, stream: str, text: str) -> None:
        if not self._active or not text:
            return
        if self._pending > self.max_pending_bytes:
            self.dropped_chars += len(text)
            return
        self._chunks.append((stream, time.time(), text))
        self._pending += len(text)
        if self._sleeping:
            self._wake()

    def _wake(self) -> None:
        if self._wake_w < 0:
            return
        try:
            os.write(self._wake_w, b"\0")
        except OSError:  # the pipe is full (a wake is pending anyway)
            pass

    # -- the drain thread ---------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            self._sleeping = True
            if not self._chunks and not self._stopping.is_set():
                select.select([self._wake_r], [], [])  # until a write after idling, or stop
            self._sleeping = False
            try:
                os.read(self._wake_r, 4096)
            except OSError:
                pass
            # Give a burst of output time to end, so it goes in one batch (stop cuts it short).
            self._stopping.wait(self.flush_interval)
            stopping = self._stopping.is_set()
            self._drain(final=stopping)
            if stopping:
                return

    def _drain(self, final: bool = False) -> None:
        records: list[dict[str, Any]] = []
        while self._chunks:
            stream, ts, text = self._chunks.popleft()
            self._pending -= len(text)
            records.extend(self._cutters[stream].feed(text, ts))
        if final:
            for cutter in self._cutters.values():
                records.extend(cutter.close())
        if records:
            try:
                self._emit(records)
            except Exception:  # the emitter counts its own losses; never the writer's problem
                pass

    def _after_fork_in_child(self) -> None:
        # The child writes through the inherited tees to its own streams; nothing is captured
        # there (its parent's drain thread does not exist in it).
        self._active = False
        self._chunks = collections.deque()
        self._pending = 0
        self.dropped_chars = 0  # the parent's count: it reports it
        self._thread = None
        self._close_pipe()  # the parent's pipe, not the child's


class PipeTee:
    """
    A child's stdout or stderr pipe, read on a thread: each chunk is written to `copy_fd` (the
    launcher's own terminal or file) as it comes and cut into line records for `emit`, batched
    every `flush_interval` (or MAX_HELD_BYTES). Another process than the child, so a crashing
    child loses nothing; the child never waits for it beyond the copy to the terminal.
    """

    def __init__(
        self,
        pipe: IO[bytes],
        copy_fd: int,
        stream: str,
        source: str,
        emit: Emit,
        flush_interval: float = 1.0,
    ):
        self._pipe = pipe
        self._copy_fd = copy_fd
        self._cutter = LineCutter(stream, source)
        self._emit = emit
        self.flush_interval = flush_interval
        self._thread = threading.Thread(target=self._loop, name=f"openruns-{stream}", daemon=True)

    def start(self) -> PipeTee:
        self._thread.start()
        return self

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _loop(self) -> None:
        fd = self._pipe.fileno()
        batch: list[dict[str, Any]] = []
        held = 0
        due = time.monotonic() + self.flush_interval
        while True:
            data = os.read(fd, 65536)
            if not data:
                break
            _write_all(self._copy_fd, data)
            batch.extend(self._cutter.feed_bytes(data, time.time()))
            held += len(data)
            if batch and (held >= MAX_HELD_BYTES or time.monotonic() >= due):
                _safe_emit(self._emit, batch)
                batch, held = [], 0
                due = time.monotonic() + self.flush_interval
        self._pipe.close()
        batch.extend(self._cutter.close())
        _safe_emit(self._emit, batch)


class FileFollower:
    """
    Follows files others write (`openruns launch`'s component logs) on one thread: every
    `interval` seconds the new bytes of each file become line records of stream "output" with
    the file's source name; `stop()` reads what is left and emits the partial lines. A file
    that grew by more than MAX_HELD_BYTES since the last pass is read from its last
    MAX_HELD_BYTES; the bytes skipped are counted (`dropped_bytes`, and `on_skip(n)`) and said
    in a line of that source.
    """

    def __init__(
        self,
        emit: Emit,
        interval: float = 1.0,
        on_skip: Callable[[int], None] | None = None,
    ):
        self._emit = emit
        self._on_skip = on_skip
        self.dropped_bytes = 0
        self.interval = interval
        self._files: dict[str, tuple[Path, LineCutter]] = {}
        self._offsets: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="openruns-follow", daemon=True)

    def follow(self, source: str, path: Path) -> None:
        self._files[source] = (path, LineCutter("output", source))
        self._offsets.setdefault(source, 0)

    def start(self) -> FileFollower:
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._read_all(final=False)
        self._read_all(final=True)

    def _read_all(self, final: bool) -> None:
        records: list[dict[str, Any]] = []
        for source, (path, cutter) in list(self._files.items()):
            skipped = 0
            try:
                with path.open("rb") as fh:
                    unread = os.fstat(fh.fileno()).st_size - self._offsets[source]
                    if unread > MAX_HELD_BYTES:
                        skipped = unread - MAX_HELD_BYTES
                        self._offsets[source] += skipped
                    fh.seek(self._offsets[source])
                    data = fh.read(MAX_HELD_BYTES)
            except OSError:
                data = b""
            if skipped:
                self.dropped_bytes += skipped
                if self._on_skip is not None:
                    self._on_skip(skipped)
                records.extend(cutter.close())
                note = f"[openruns: {skipped} bytes of this output were skipped: it grew faster"
                records.append(
                    {
                        "ts": time.time(),
                        "stream": "output",
                        "source": source,
                        "line": f"{note} than it could be sent]",
                    }
                )
            self._offsets[source] += len(data)
            if data:
                records.extend(cutter.feed_bytes(data, time.time()))
            if final:
                records.extend(cutter.close())
        _safe_emit(self._emit, records)


def _safe_emit(emit: Emit, records: list[dict[str, Any]]) -> None:
    if records:
        try:
            emit(records)
        except Exception:
            pass


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except OSError:  # the launcher's own output is gone (a closed pipe): keep reading
            return
