"""
How a process ends, reported to its open runs.

One atexit hook, one pair of SIGTERM/SIGINT handlers and one excepthook serve every open run of
the process (open runs are held here strongly, so a run the caller dropped is still closed).

- interpreter exit with a run open: crashed ("process exited without finishing the run", or the
  uncaught exception that ended it); a process attached to a run reports that exception to
  the run instead (`RuntimeError: boom (trainer)`), for its owner to fail the run with;
- SIGTERM: crashed, SIGINT: cancelled ("terminated by SIGTERM"); then the handler that was
  installed before ours runs (the default one re-delivers the signal), and when no run is open
  any more the previous handlers are put back.

A forked child inherits all of this; its runs are attached, so each of these only flushes (and
reports an uncaught exception).
"""

from __future__ import annotations

import atexit
import multiprocessing.util
import os
import signal
import sys
import threading
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .spec import RunStatus
from .upload import fork

if TYPE_CHECKING:
    from .run import Run

__all__ = ["closed", "opened"]

# A scheduler's grace period after SIGTERM is often 30 s (SLURM KillWait, Kubernetes); the run
# is closed within it and the rest of the drain budget is not waited for.
SIGNAL_DRAIN_SECONDS = 20.0
_SIGNALS = (signal.SIGTERM, signal.SIGINT)

_open: dict[int, Run] = {}
_previous: dict[int, Any] = {}
_uncaught: BaseException | None = None
_atexit_registered = False
_lock = threading.RLock()


def opened(run: Run) -> None:
    """Track `run` until closed(); install the process hooks on first use."""
    global _atexit_registered
    with _lock:
        _open[id(run)] = run
        if not _atexit_registered:
            atexit.register(_at_exit)
            _chain_excepthook()
            _atexit_registered = True
        if run.owns_lifecycle:
            _install_signal_handlers()


def closed(run: Run) -> None:
    with _lock:
        _open.pop(id(run), None)
        if not any(r.owns_lifecycle for r in _open.values()):
            _restore_signal_handlers()


def _at_exit() -> None:
    fatal = None
    if _uncaught is not None:
        described = f"{type(_uncaught).__name__}: {_uncaught}"
        error = f"process exited with an uncaught {described}"
        # An interrupt is the launcher's signal coming through, not a component's failure.
        fatal = described if isinstance(_uncaught, Exception) else None
    else:
        error = "process exited without finishing the run"
    for run in list(_open.values()):
        run._finish_quietly(
            RunStatus.CRASHED,
            error,
            timeout=None,
            fatal=fatal,
            exception=_uncaught if isinstance(_uncaught, Exception) else None,
        )


def _on_signal(signum: int, frame: Any) -> None:
    # Read the displaced handler before finishing: closing the last run restores the table.
    previous = _previous.get(signum, signal.SIG_DFL)
    name = signal.Signals(signum).name
    status = RunStatus.CANCELLED if signum == signal.SIGINT else RunStatus.CRASHED
    for run in list(_open.values()):
        run._finish_quietly(status, f"terminated by {name}", timeout=SIGNAL_DRAIN_SECONDS)
    _restore_signal_handlers()
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


def _restore_signal_handlers() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
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
