"""Subprocesses of the tests: default signal dispositions, and nothing left running."""

from __future__ import annotations

import signal
import subprocess

_live: list[subprocess.Popen] = []


def default_signals() -> None:
    """preexec_fn: the child starts with the default SIGINT, SIGTERM and SIGHUP dispositions, as
    if started from an interactive shell, whatever the test runner inherited (a shell's
    background job, CI's included, starts with SIGINT ignored, and Python then keeps it ignored;
    a runner started with `nohup` ignores SIGHUP, which a launcher then keeps ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def track(proc: subprocess.Popen) -> subprocess.Popen:
    """Kill `proc` (and close its pipes) at the end of the test if it is still there."""
    _live.append(proc)
    return proc


def reap() -> None:
    for proc in _live:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    _live.clear()
