"""
A signal whose handler did not run, sent again to the main thread.

CPython runs a Python signal handler on the main thread, between two bytecodes; its C handler
only marks the signal as pending. A blocking system call of the main thread (time.sleep, a
lock, a read) is interrupted only by a signal that arrives *during* the call. One that arrives
just before it (after the last bytecode, before the call), or that the kernel hands to another
thread, stays pending until the call returns: a `time.sleep(30)` sleeps on, and a Ctrl-C or a
scheduler's SIGTERM waits as long, or for ever. The window is microseconds, but a process whose
other threads take the GIL as the main thread blocks (the SDK's console drain and uploaders)
falls into it: 2-10 of 150 jobs under load lost their Ctrl-C (benchmarks/sigint_loss.py).

    install(handler)    # main thread, beside signal.signal(signum, handler)
    handled()           # first thing in `handler`: this signal is not lost
    uninstall()         # main thread, when the handlers are put back

While installed, the C handler also writes each signal's number to a socket
(`signal.set_wakeup_fd`), which `handled()` drains. A thread watches the socket: a byte of one
of the relayed signals still unread RELAY_AFTER seconds later means its handler has not run, and
the signal is sent again to the main thread (`signal.pthread_kill`). That interrupts its system
call, and Python runs the handler once: a pending signal is a mark, not a count. Sent again at
most RELAY_TIMES times (a C library that retries its call on EINTR is not interrupted by any
number of them).

Not done when another owner holds the wakeup fd (asyncio's add_signal_handler, Trio), nor for a
signal whose installed handler is not ours: that handler does not call handled(), and would run
twice. A handler already running is never sent a second signal, unless it starts in the
microseconds between the thread's check and its pthread_kill, after RELAY_AFTER of waiting.
"""

from __future__ import annotations

import select
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from . import fork

__all__ = ["RELAY_AFTER", "RELAY_TIMES", "handled", "install", "uninstall"]

RELAY_AFTER = 0.25  # seconds a signal may wait for its handler before it is sent again
RELAY_TIMES = 3
_PEEK = 256


class _Relay:
    """The process's wakeup socket and the thread that watches it."""

    def __init__(self) -> None:
        self._reader, self._writer = socket.socketpair()
        self._reader.setblocking(False)
        self._writer.setblocking(False)
        self.handler: Callable[[int, Any], None] | None = None
        self.signals: frozenset[int] = frozenset()
        self.installed = False
        self._thread = threading.Thread(target=self._watch, name="openruns-signals", daemon=True)
        self._thread.start()
        fork.register(self)

    def install(self, handler: Callable[[int, Any], None], signals: frozenset[int]) -> None:
        previous = signal.set_wakeup_fd(self._writer.fileno(), warn_on_full_buffer=False)
        if previous not in (-1, self._writer.fileno()):
            signal.set_wakeup_fd(previous)  # someone else's: theirs to keep
            return
        self.handler, self.signals, self.installed = handler, signals, True

    def uninstall(self) -> None:
        if not self.installed:
            return
        self.installed = False
        current = signal.set_wakeup_fd(-1)
        if current != self._writer.fileno():
            signal.set_wakeup_fd(current)  # taken over since: not ours to take away

    def drain(self) -> None:
        try:
            while self._reader.recv(4096):
                pass
        except OSError:  # BlockingIOError: empty
            pass

    def _watch(self) -> None:
        main = threading.main_thread().ident or 0
        while True:
            select.select([self._reader], [], [])
            for attempt in range(RELAY_TIMES + 1):
                time.sleep(RELAY_AFTER)  # a handler that runs at all runs well within this
                unread = self._peek()
                waiting = self._relayed(unread)
                if not waiting or attempt == RELAY_TIMES:
                    break
                signal.pthread_kill(main, waiting[0])
            if unread:  # others' signals, or given up on: not to be seen again
                self._consume(len(unread))

    def _peek(self) -> bytes:
        try:
            return self._reader.recv(_PEEK, socket.MSG_PEEK)
        except OSError:  # BlockingIOError: drained by the handler
            return b""

    def _consume(self, size: int) -> None:
        try:
            self._reader.recv(size)
        except OSError:
            pass

    def _relayed(self, unread: bytes) -> list[int]:
        """The relayed signals among `unread` whose installed handler is ours."""
        if not self.installed:
            return []
        return [
            signum
            for signum in dict.fromkeys(unread)
            if signum in self.signals and signal.getsignal(signum) is self.handler
        ]

    def _after_fork_in_child(self) -> None:
        # The child's signals are not the parent's to relay: its watching thread is gone, and
        # the socket is shared with the parent's.
        global _relay
        try:
            self.uninstall()  # ours goes; a wakeup fd someone took over stays theirs
        except ValueError:  # forked from a thread CPython does not take as main
            self.installed = False
        _relay = None


_relay: _Relay | None = None


def install(handler: Callable[[int, Any], None], signals: frozenset[int]) -> None:
    """Relay `signals` while `handler` is their installed handler; from the main thread."""
    global _relay
    if threading.current_thread() is not threading.main_thread():
        return
    if not hasattr(signal, "pthread_kill"):  # Windows: no signal to send a thread
        return
    if _relay is None:
        _relay = _Relay()
    _relay.install(handler, signals)


def uninstall() -> None:
    if _relay is not None and threading.current_thread() is threading.main_thread():
        _relay.uninstall()


def handled() -> None:
    """The handler runs: what the C handler wrote so far needs no relay."""
    if _relay is not None:
        _relay.drain()
