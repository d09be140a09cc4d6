"""
Run: one training job or evaluation, as seen from one process.

Lifecycle: RUNNING until finish() (or fail(), the context manager, the exit hooks) starts;
from then every log_* raises RunFinishedError. Only the process that created the run (the
owner) finalizes it; an attached run (a child process, another rank, `id=`) only flushes its
own records when it finishes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from . import exits
from .backends.base import Backend
from .errors import OpenrunsError, RunFinishedError
from .identity import unexport_run
from .records import clean_finite
from .settings import Settings
from .spec import ConfigSource, RunStatus
from .upload import fork
from .upload.pipeline import Pipeline

__all__ = ["Run"]

logger = logging.getLogger("openruns")


class Run:
    """
    A run opened by `openruns.init()`.

        run = openruns.init(kind="train", model="Qwen/Qwen3-8B", config="rl.toml")
        with run:
            for step in range(steps):
                run.log_metrics({"loss": loss, "reward": reward}, step=step)
                run.log_episodes(episodes)

    Every log_* is a cheap enqueue that never blocks: records are encoded and written on
    background threads. What could not be written is counted (`dropped_records`,
    `failed_records`) and described (`errors`), never lost silently.
    """

    def __init__(
        self,
        *,
        run_id: str,
        kind: str,
        name: str | None,
        settings: Settings,
        backend: Backend,
        attached: bool,
        config_source: ConfigSource | None = None,
        run_dir: Path | None = None,
    ):
        self._id = run_id
        self._kind = kind
        self._name = name
        self._settings = settings
        self._backend = backend
        self._attached = attached
        self._config_source = config_source
        self._run_dir = run_dir
        self._owner_pid: int | None = None if attached else os.getpid()
        self._status = RunStatus.RUNNING
        self._error: str | None = None
        self.summary: dict[str, Any] = {}
        self._published: dict[str, Any] = {}  # the summary as last sent by flush()
        self._step = -1
        self._finish_lock = threading.RLock()
        self._finishing = False
        self._raised_deferred = False
        self._pipeline: Pipeline | None = None
        if settings.mode != "disabled":
            self._pipeline = Pipeline(backend.make_sink, run_id, kind, settings.max_queued_records)
            self._pipeline.start()  # here, not in the first log call, which must stay cheap
        fork.register(self)
        exits.opened(self)

    # -- identity -----------------------------------------------------------------------------

    @property
    def id(self) -> str:
        return self._id

    @property
    def name(self) -> str | None:
        return self._name

    @property
    def kind(self) -> str:
        return self._kind

    @property
    def mode(self) -> str:
        return self._settings.mode

    @property
    def url(self) -> str | None:
        """The run's dashboard page (online), its directory as a file:// URL (offline), or None."""
        return self._backend.url

    @property
    def dir(self) -> Path | None:
        """The run directory: the run itself (offline), or its metadata and spool (online)."""
        return self._run_dir

    @property
    def token(self) -> str | None:
        """The per-run token the server minted for this run's owner (online runs), which a
        launcher exports to its children as OPENRUNS_API_KEY; None otherwise."""
        return getattr(self._backend, "token", None)

    @property
    def config_source(self) -> ConfigSource | None:
        return self._config_source

    @property
    def attached(self) -> bool:
        """True when another process owns this run: finish() here only flushes."""
        return self._attached

    @property
    def owns_lifecycle(self) -> bool:
        return self._owner_pid == os.getpid()

    @property
    def status(self) -> RunStatus:
        return self._status

    @property
    def error(self) -> str | None:
        return self._error

    @property
    def finished(self) -> bool:
        return self._finishing

    # -- losses -------------------------------------------------------------------------------

    @property
    def dropped_records(self) -> int:
        """Records refused because the queue was full, or not written before finish's deadline."""
        return self._pipeline.dropped if self._pipeline else 0

    @property
    def failed_records(self) -> dict[str, int]:
        """Records a destination could not store, by destination (`encode`: not JSON-able)."""
        return dict(self._pipeline.stats.failed) if self._pipeline else {}

    @property
    def spooled_records(self) -> int:
        """Records of this process left in the local spool, not delivered to the server:
        `openruns sync <run.dir>` delivers them."""
        return self._pipeline.stats.spooled if self._pipeline else 0

    @property
    def errors(self) -> list[str]:
        return list(self._pipeline.stats.errors) if self._pipeline else []

    # -- logging ------------------------------------------------------------------------------

    def log_metrics(self, values: Mapping[str, Any], *, step: int | None = None) -> None:
        """
        Log scalar metrics at `step` (default: one past the last step logged, from 0). Nested
        mappings become `a/b` keys; NaN, infinities and non-numbers are dropped and named in a
        warning. Steps may repeat or go backwards; every row is kept.
        """
        if self._finishing:
            raise RunFinishedError(f"run {self._id} is finished; log_metrics() was called after")
        if not isinstance(values, Mapping):
            raise TypeError(f"values must be a mapping, got {type(values).__name__}")
        step = self._next_step(step)
        if self._pipeline is not None:
            self._pipeline.put("metrics", dict(values), 1, step, time.time())

    def log_episodes(self, episodes: Iterable[Any], *, step: int | None = None) -> None:
        """
        Log episodes: mappings with a `traces` list, or objects with `to_record()` /
        `model_dump()`. Each episode's step is `step`, else its `run.work.step`, else the last
        step logged. The objects are encoded later, on the upload side; do not mutate them after.
        """
        self._log_records("episodes", episodes, step)

    def log_traces(self, traces: Iterable[Any], *, step: int | None = None) -> None:
        """Log bare traces (not wrapped in an episode); as log_episodes otherwise."""
        self._log_records("traces", traces, step)

    def _log_records(self, stream: str, records: Iterable[Any], step: int | None) -> None:
        if self._finishing:
            raise RunFinishedError(f"run {self._id} is finished; log_{stream}() was called after")
        if isinstance(records, (Mapping, str, bytes)) or not isinstance(records, Iterable):
            raise TypeError(
                f"log_{stream}() takes an iterable of records, got {type(records).__name__}"
            )
        if step is not None and (not isinstance(step, int) or isinstance(step, bool)):
            raise TypeError(f"step must be an int, got {type(step).__name__}")
        batch = list(records)
        if batch and self._pipeline is not None:
            fallback = step if step is not None else (self._step if self._step >= 0 else None)
            self._pipeline.put(stream, batch, len(batch), fallback, 0.0)

    def update_summary(self, values: Mapping[str, Any]) -> None:
        """Merge `values` (non-finite numbers dropped) into the run's summary."""
        if self._finishing:
            raise RunFinishedError(f"run {self._id} is finished; update_summary() was called after")
        if not isinstance(values, Mapping):
            raise TypeError(f"values must be a mapping, got {type(values).__name__}")
        self.summary.update(clean_finite(values))

    def _next_step(self, step: int | None) -> int:
        if step is None:
            step = self._step + 1
        elif not isinstance(step, int) or isinstance(step, bool):
            raise TypeError(f"step must be an int, got {type(step).__name__}")
        self._step = step
        return step

    # -- flushing and finishing ---------------------------------------------------------------

    def flush(self, timeout: float | None = 30.0) -> bool:
        """
        Wait until everything logged before this call is written (or counted as failed).
        False when `timeout` passed first. Under on_error="raise", re-raises the first failure.
        """
        drained = self._pipeline.flush(timeout) if self._pipeline else True
        if self.owns_lifecycle and not self._finishing and self.summary != self._published:
            summary = dict(self.summary)
            self._contain("updating the run", lambda: self._backend.update(summary))
            self._published = summary
        self._raise_deferred()
        return drained

    def finish(
        self,
        summary: Mapping[str, Any] | None = None,
        *,
        status: RunStatus | str = RunStatus.COMPLETED,
        error: str | None = None,
        timeout: float | None = None,
    ) -> None:
        """
        Drain uploads (within `timeout`, default the finish_timeout setting) and close the run
        with `status`. Idempotent: later calls return at once, concurrent ones wait for the first.
        An attached run only drains its own uploads.
        """
        status = RunStatus(status)
        if not status.is_terminal():
            raise ValueError(f"finish() needs a terminal status, got {status.value!r}")
        with self._finish_lock:
            if self._finishing:
                return  # finished, or re-entered from a signal handler while finishing
            if summary is not None:
                if not isinstance(summary, Mapping):
                    raise TypeError(f"summary must be a mapping, got {type(summary).__name__}")
                self.summary.update(clean_finite(summary))
            self._finishing = True
            self._status = status
            self._error = error
            self._teardown(self._settings.finish_timeout if timeout is None else timeout)
        self._raise_deferred()

    def fail(self, error: str | BaseException, *, timeout: float | None = None) -> None:
        """finish() with status failed and `error` ("<Type>: <message>" for an exception)."""
        self.finish(status=RunStatus.FAILED, error=_describe(error), timeout=timeout)

    def _teardown(self, timeout: float) -> None:
        owner = self.owns_lifecycle
        deadline = time.monotonic() + timeout
        drained = True
        if self._pipeline is not None:
            drained = self._pipeline.close(timeout)
            sink = self._pipeline.sink
            self._contain(
                "recording this process's losses",
                lambda: self._backend.close_writer(
                    getattr(sink, "writer_id", None), self._pipeline.stats, self.dropped_records
                ),
            )
        if owner:
            losses = self._losses()
            self._contain(
                "finalizing the run",
                lambda: self._backend.finalize(
                    self._status, self._error, self.summary, losses, deadline
                ),
            )
            unexport_run(self._id)
        self._contain("closing the connection", self._backend.close)
        exits.closed(self)
        self._report_losses(drained)

    def _losses(self) -> dict[str, Any]:
        losses: dict[str, Any] = {
            "dropped_records": self.dropped_records,
            "failed_records": self.failed_records,
        }
        if self._pipeline is not None:
            if self._pipeline.stats.spooled:
                losses["spooled_records"] = self._pipeline.stats.spooled
            if self._pipeline.stats.converted:
                losses["converted_values"] = dict(self._pipeline.stats.converted)
        return losses

    def _report_losses(self, drained: bool) -> None:
        if self.dropped_records or self.failed_records:
            logger.warning(
                "openruns: run %s lost records: %d dropped, failed %s%s",
                self._id,
                self.dropped_records,
                self.failed_records or "{}",
                "" if drained else " (uploads had not drained by the deadline)",
            )

    def _finish_quietly(self, status: RunStatus, error: str, timeout: float | None) -> None:
        """finish() for the exit hooks: never raises; the drain budget is the smaller one."""
        budget = self._settings.finish_timeout
        if timeout is not None:
            budget = min(budget, timeout)
        try:
            self.finish(status=status, error=error, timeout=budget)
        except Exception:
            logger.exception("openruns: closing run %s at exit failed", self._id)

    def _contain(self, what: str, action: Any) -> None:
        try:
            action()
        except Exception as exc:
            if self._pipeline is not None:
                self._pipeline.stats.record_error(what, exc)
            else:
                logger.warning("openruns: %s failed: %s: %s", what, type(exc).__name__, exc)

    def _raise_deferred(self) -> None:
        if self._settings.on_error != "raise" or self._pipeline is None or self._raised_deferred:
            return
        first = self._pipeline.stats.first_error
        if first is not None:
            self._raised_deferred = True
            raise first

    # -- context manager and fork -------------------------------------------------------------

    def __enter__(self) -> Run:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        try:
            if exc is None:
                self.finish()
            elif isinstance(exc, (KeyboardInterrupt, asyncio.CancelledError)):
                self.finish(status=RunStatus.CANCELLED, error=f"interrupted ({exc_type.__name__})")
            else:
                self.fail(exc)
        except OpenrunsError:
            if exc is None:
                raise
            logger.exception("openruns: closing run %s failed", self._id)
        return False

    def _after_fork_in_child(self) -> None:
        # The child joins the run but never owns its lifecycle; the pipeline resets itself.
        self._finish_lock = threading.RLock()
        self._attached = True

    def __repr__(self) -> str:
        return f"<openruns.Run id={self._id!r} kind={self._kind} status={self._status.value}>"


def _describe(error: str | BaseException) -> str:
    if isinstance(error, BaseException):
        return f"{type(error).__name__}: {error}"
    return str(error)
