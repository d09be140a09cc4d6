"""
How a process ends, reported to its open runs.

One atexit hook, one pair of SIGTERM/SIGINT handlers and one excepthook serve every open run of
the process, owned or attached (open runs are held here strongly, so a run the caller dropped
is still closed).

- interpreter exit with a run open: crashed ("process exited without finishing the run", or the
  uncaught exception that ended it), cancelled when the process was interrupted (an uncaught
  KeyboardInterrupt, or a SIGINT that arrived before); a process attached to a run reports an
  uncaught exception to the run instead (`RuntimeError: boom (trainer)`), for its owner to fail
  the run with;
- SIGTERM: every open run is closed within the signal's drain budget (an owned one crashed,
  "terminated by SIGTERM"; an attached one only flushes: what it cannot deliver is spooled and
  counted, issue 20), then the handler that was installed before ours runs (the default one
  re-delivers the signal); a close already under way on the interrupted thread (finish()
  draining) is hurried to that budget instead, and the signal delivered when it ends;
- SIGINT: the run stays open and the previous handler runs (Python's raises KeyboardInterrupt,
  which reaches the caller's code: a trainer may catch it to checkpoint and keep logging); the
  run is cancelled when the exception leaves `with run:`, or at exit. Only where SIGINT would
  kill the process outright (SIG_DFL) are the runs closed first (cancelled), as for SIGTERM.

A signal whose handler has not run a moment after it came (it came just before the main thread
blocked in a system call, which it then did not interrupt) is sent again (signal_relay.py).

When no run is open any more the previous handlers are put back. A forked child inherits all
of this; its runs are attached, so each of these only flushes (and reports an uncaught
exception).
"""

from __future__ import annotations

import atexit
import multiprocessing.util
import os
import signal
import sys
import threading
from types import TracebackType
from typing import Any, Protocol

from . import fork, signal_relay
from .spec import RunStatus

__all__ = ["OpenRun", "closed", "opened"]


class OpenRun(Protocol):
    """What the exit paths ask of an open run (run.Run is one): close it without raising,
    within `timeout` seconds (None: its own budget). `fatal` is the uncaught exception that
    ends the process, described for the run's owner; `exception` is that exception, whose
    traceback goes to the run's console output. True: its close was already under way on the
    calling thread (a finish() the signal interrupted), hurried now; the caller returns to it."""

    def _finish_quietly(
        self,
        status: RunStatus,
        error: str,
        timeout: float | None,
        fatal: str | None = None,
        exception: BaseException | None = None,
    ) -> bool: ...


# After SIGTERM a run is closed within this (or finish_timeout, if smaller), not the whole drain
# budget: a scheduler's grace is often 30 s (SLURM KillWait, Kubernetes), and a component of
# `openruns run` / `launch` gets 15 s (launch.DEFAULT_GRACE_SECONDS) before its SIGKILL, by
# which its records must be delivered or spooled (issue 20).
SIGNAL_DRAIN_SECONDS = 12.0
_SIGNALS = (signal.SIGTERM, signal.SIGINT)

_open: dict[int, OpenRun] = {}
_previous: dict[int, Any] = {}
# A signal that came while this thread was closing a run: delivered once no run is open.
_pending: dict[int, Any] = {}
_uncaught: BaseException | None = None
_interrupted = False  # a SIGINT arrived: a run still open at exit is cancelled
_atexit_registered = False
_lock = threading.RLock()


def opened(run: OpenRun) -> None:
    """Track `run` until closed(); install the process hooks on first use."""
    global _atexit_registered
    with _lock:
        _open[id(run)] = run
        if not _atexit_registered:
            atexit.register(_at_exit)
            _chain_excepthook()
            _atexit_registered = True
        _install_signal_handlers()


def closed(run: OpenRun) -> None:
    pending: list[tuple[int, Any]] = []
    with _lock:
        _open.pop(id(run), None)
        if not _open:
            _restore_signal_handlers()
            pending = list(_pending.items())
            _pending.clear()
    for signum, previous in pending:  # a signal that came during this close (_on_signal)
        _deliver(signum, previous, None)


def _at_exit() -> None:
    fatal = None
    status = RunStatus.CRASHED
    if isinstance(_uncaught, KeyboardInterrupt):
        status, error = RunStatus.CANCELLED, "interrupted (KeyboardInterrupt)"
    elif _interrupted:
        status, error = RunStatus.CANCELLED, "terminated by SIGINT"
    elif _uncaught is not None:
        described = f"{type(_uncaught).__name__}: {_uncaught}"
        error = f"process exited with an uncaught {described}"
        # An interrupt is the launcher's signal coming through, not a component's failure.
        fatal = described if isinstance(_uncaught, Exception) else None
    else:
        error = "process exited without finishing the run"
    for run in list(_open.values()):
        run._finish_quietly(
            status,
            error,
            timeout=None,
            fatal=fatal,
            exception=_uncaught if isinstance(_uncaught, Exception) else None,
        )


def _on_signal(signum: int, frame: Any) -> None:
    global _interrupted
    signal_relay.handled()
    # Read the displaced handler before finishing: closing the last run restores the table.
    previous = _previous.get(signum, signal.SIG_DFL)
    name = signal.Signals(signum).name
    if signum == signal.SIGINT:
        _interrupted = True
        if callable(previous):  # KeyboardInterrupt, or the application's own handler, decides
            previous(signum, frame)
            return
    status = RunStatus.CANCELLED if signum == signal.SIGINT else RunStatus.CRASHED
    interrupted_close = False
    for run in list(_open.values()):
        if run._finish_quietly(status, f"terminated by {name}", timeout=SIGNAL_DRAIN_SECONDS):
            interrupted_close = True
    if interrupted_close:
        # This thread was inside a finish() draining uploads (up to finish_timeout): ending
        # the process here would cut the drain, and its records would be neither sent nor
        # spooled nor counted. The close goes on, hurried to the signal's budget; closed()
        # delivers the signal when it ends.
        _pending.setdefault(signum, previous)
        return
    _restore_signal_handlers()
    _deliver(signum, previous, frame)


def _deliver(signum: int, previous: Any, frame: Any) -> None:
    """What the signal would have done without openruns: the displaced handler, or the
    default one (re-delivered, so the process ends by the signal)."""
    if callable(previous):
        previous(signum, frame)
    elif previous == signal.SIG_DFL:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _install_signal_handlers() -> None:
    if _previous or threading.current_thread() is not threading.main_thread():
        return  # already ours, or signals can only be handled from the main thread
    for signum in _SIGNALS:
        current = signal.getsignal(signum)
        if current is signal.SIG_IGN:
            continue  # the process chose to ignore it (nohup); so do we
        _previous[signum] = current
        signal.signal(signum, _on_signal)
    if _previous:
        signal_relay.install(_on_signal, frozenset(_previous))


def _restore_signal_handlers() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    signal_relay.uninstall()
    for signum, previous in list(_previous.items()):
        if signal.getsignal(signum) is _on_signal:
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        del _previous[signum]


def _chain_excepthook() -> None:
    previous = sys.excepthook

    def hook(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
        global _uncaught
        _uncaught = exc
        if isinstance(exc, KeyboardInterrupt):
            tb = _without_our_signal_handler(tb)
        previous(exc_type, exc, tb)

    sys.excepthook = hook


def _without_our_signal_handler(tb: TracebackType | None) -> TracebackType | None:
    """Ctrl-C's traceback as without openruns: it ends in the user's frame the signal came to,
    not in `_on_signal`, which closed the runs and chained to Python's handler (issue 24)."""
    entry, last = tb, None
    while entry is not None:
        if entry.tb_frame.f_code is _on_signal.__code__ and last is not None:
            last.tb_next = None
            break
        last, entry = entry, entry.tb_next
    return tb


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.RLock()


def _flush_at_multiprocessing_exit(_: object) -> None:
    # multiprocessing's fork children leave through os._exit after running its finalizers, not
    # atexit; they clear the finalizers inherited from the parent, then call the after-fork
    # hooks, so the finalizer is registered from such a hook.
    multiprocessing.util.Finalize(None, _at_exit, exitpriority=100)


class _Hook:
    """Something weakly referenceable that lives as long as this module."""


_hook = _Hook()
multiprocessing.util.register_after_fork(_hook, _flush_at_multiprocessing_exit)
# The module itself is the fork-aware object (modules are weakly referenceable and live forever).
fork.register(sys.modules[__name__])
