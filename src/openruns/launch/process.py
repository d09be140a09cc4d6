"""
Child processes in their own process groups, and how they end.

Each command runs as the leader of a new process group (in the launcher's session, so it keeps
the terminal for output but Ctrl-C reaches only the launcher, which forwards it). Signalling the
group reaches whatever the command started (a shell's children, torchrun's workers, srun).
Stopping a group is SIGTERM, a grace period for teardown, then SIGKILL to what is left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

__all__ = [
    "Child",
    "describe_exit",
    "exit_status",
    "group_alive",
    "kill_groups",
    "signal_group",
    "spawn",
    "wait_groups",
]

_POLL_SECONDS = 0.05


@dataclass
class Child:
    """A started command: its Popen (leader of process group `pid`) and how it ended."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path | None = None
    returncode: int | None = None
    waiter: threading.Thread | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.returncode is None


def spawn(
    name: str,
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | os.PathLike[str] | None = None,
    stdout: IO[Any] | int | None = None,
    log_path: Path | None = None,
    on_exit: Callable[[Child], None],
    pipes: bool = False,
) -> Child:
    """
    Start `argv` as the leader of a new process group; `on_exit(child)` is called from a waiter
    thread once the leader has exited (with `child.returncode` set). `stdout`: a file for its
    output and errors (stdin then reads nothing); `pipes`: its stdout and stderr are pipes for
    the caller to read (`child.proc.stdout`, `.stderr`), stdin is inherited. Raises OSError when
    the command cannot be started (not found, not executable, bad cwd).
    """
    if pipes:
        streams: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    elif stdout is not None:
        streams = {"stdin": subprocess.DEVNULL, "stdout": stdout, "stderr": subprocess.STDOUT}
    else:
        streams = {}
    proc = subprocess.Popen(list(argv), env=dict(env), cwd=cwd, process_group=0, **streams)
    child = Child(name, proc, log_path)

    def wait() -> None:
        child.returncode = proc.wait()
        on_exit(child)

    child.waiter = threading.Thread(target=wait, name=f"openruns-wait-{name}", daemon=True)
    child.waiter.start()
    return child


def signal_group(child: Child, signum: int) -> None:
    """Send `signum` to the child's process group (nothing if the group is gone)."""
    try:
        os.killpg(child.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def group_alive(child: Child) -> bool:
    """Whether any process is left in the child's group (the leader included, until reaped)."""
    try:
        os.killpg(child.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def wait_groups(children: Sequence[Child], deadline: float) -> list[Child]:
    """Wait until every child's leader has exited and its group is empty, or the deadline;
    returns the children whose group still has processes (after the deadline)."""
    while True:
        left = [c for c in children if c.running or group_alive(c)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(_POLL_SECONDS)


def kill_groups(children: Sequence[Child], timeout: float = 5.0) -> None:
    """SIGKILL every group and wait (briefly) for the leaders to be reaped."""
    for child in children:
        signal_group(child, signal.SIGKILL)
    wait_groups(children, time.monotonic() + timeout)


def exit_status(returncode: int) -> int:
    """The shell's exit status for a Popen returncode: N for exit N, 128+N for signal N."""
    return 128 - returncode if returncode < 0 else returncode


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    return f"exited with code {returncode}"
