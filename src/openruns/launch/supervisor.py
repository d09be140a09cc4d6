"""
Supervising child processes until they have all ended: the core of `openruns run` and `launch`.

The main thread waits on one event queue fed by a waiter thread per child (its exit) and by
the signal handlers (SIGTERM, SIGINT, SIGHUP). The rules:

- the first child to fail (non-zero exit, or killed by a signal) while nothing is being
  stopped is *the* failure, and every other child is stopped;
- a SIGTERM, SIGINT or SIGHUP to the launcher is forwarded to every child's process group, which is
  then stopped the same way; a second signal SIGKILLs every group at once;
- once every non-daemon child has exited, what is left (daemons, and any process a command
  left behind in its group) is stopped too;
- stopping is: the signal to each group, up to `grace` seconds for the groups to empty, then
  SIGKILL. Exits during a stop are its effect, never a failure.
"""

from __future__ import annotations

import os
import queue
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .process import Child, describe_exit, group_alive, kill_groups, signal_group, spawn

__all__ = ["Outcome", "Supervisor"]

# SIGHUP too: the terminal of an interactive launch closing is an end like any other.
_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_KILL_WAIT_SECONDS = 5.0


@dataclass(frozen=True)
class Outcome:
    """How a supervised launch ended."""

    signal: int | None  # SIGTERM / SIGINT received by the launcher, if any
    failed: Child | None  # the first child to fail, if any (ignored when `signal` is set)
    children: tuple[Child, ...]


class Supervisor:
    def __init__(self, grace: float, prog: str):
        self.grace = grace
        self.prog = prog
        self.children: list[Child] = []
        self._daemons: set[str] = set()
        self._events: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._previous: dict[int, Any] = {}
        self._signal: int | None = None
        self._failed: Child | None = None
        self._stop_deadline: float | None = None
        self._kill_deadline: float | None = None

    # -- setup --------------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        """Take over SIGTERM/SIGINT/SIGHUP (call after openruns.init(), whose handlers these
        replace)."""
        for signum in _SIGNALS:
            if signal.getsignal(signum) is signal.SIG_IGN:
                continue  # ignored on purpose (`nohup`): stays ignored, in the children too
            self._previous[signum] = signal.signal(signum, self._on_signal)

    def restore_signal_handlers(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str | os.PathLike[str] | None = None,
        stdout: IO[Any] | None = None,
        log_path: Path | None = None,
        daemon: bool = False,
        pipes: bool = False,
    ) -> Child:
        child = spawn(
            name,
            argv,
            env=env,
            cwd=cwd,
            stdout=stdout,
            log_path=log_path,
            on_exit=lambda c: self._events.put(("exit", c)),
            pipes=pipes,
        )
        self.children.append(child)
        if daemon:
            self._daemons.add(name)
        return child

    def stop(self) -> None:
        """Stop every child (SIGTERM, grace, SIGKILL); supervise() then waits for the end."""
        self._begin_stop(signal.SIGTERM)

    # -- the loop -----------------------------------------------------------------------------

    def supervise(self) -> Outcome:
        """Run until every child has ended and its group is empty; see the module docstring."""
        while True:
            self._handle_events(0.05 if self._stop_deadline is not None else 0.5)
            if self._stop_deadline is None and not any(
                c.running for c in self.children if c.name not in self._daemons
            ):
                self._begin_stop(signal.SIGTERM)
            if self._stop_deadline is None:
                continue
            left = [c for c in self.children if c.running or group_alive(c)]
            if not left:
                break
            now = time.monotonic()
            if self._kill_deadline is None and now >= self._stop_deadline:
                self._say(
                    f"{', '.join(c.name for c in left)} still running {self.grace:g} s after "
                    "the stop signal: SIGKILL"
                )
                self._kill(left)
            elif self._kill_deadline is not None and now >= self._kill_deadline:
                self._say(f"{', '.join(c.name for c in left)} did not die after SIGKILL")
                break
        return Outcome(self._signal, self._failed, tuple(self.children))

    def _handle_events(self, timeout: float) -> None:
        try:
            event = self._events.get(timeout=timeout)
        except queue.Empty:
            return
        while True:
            kind, value = event
            if kind == "exit":
                self._on_exit(value)
            else:
                self._on_signal_event(value)
            try:
                event = self._events.get_nowait()
            except queue.Empty:
                return

    def _on_exit(self, child: Child) -> None:
        assert child.returncode is not None
        stopping = self._stop_deadline is not None
        if child.returncode != 0 and not stopping:
            self._failed = child
            others = "; stopping the others" if len(self.children) > 1 else ""
            self._say(f"{child.name} {describe_exit(child.returncode)}{others}")
            self._begin_stop(signal.SIGTERM)
        elif not stopping or child.returncode != 0:
            self._say(f"{child.name} {describe_exit(child.returncode)}")

    def _on_signal_event(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if self._signal is None and self._kill_deadline is None:
            self._signal = signum
            self._say(f"received {name}: forwarding it, {self.grace:g} s grace")
            self._begin_stop(signum, restart=True)
        else:
            self._say(f"received {name} again: SIGKILL")
            self._kill([c for c in self.children if c.running or group_alive(c)])

    def _begin_stop(self, signum: int, restart: bool = False) -> None:
        if self._stop_deadline is not None and not restart:
            return
        if self._stop_deadline is None:
            self._stop_deadline = time.monotonic() + self.grace
        for child in self.children:
            if child.running or group_alive(child):
                signal_group(child, signum)

    def _kill(self, children: Sequence[Child]) -> None:
        self._kill_deadline = time.monotonic() + _KILL_WAIT_SECONDS
        if self._stop_deadline is None:
            self._stop_deadline = time.monotonic()
        kill_groups(children, timeout=0)

    def _on_signal(self, signum: int, frame: Any) -> None:
        # Only queue it: the main thread may be anywhere, SimpleQueue.put is reentrant.
        self._events.put(("signal", signum))

    def _say(self, message: str) -> None:
        print(f"{self.prog}: {message}", file=sys.stderr, flush=True)
