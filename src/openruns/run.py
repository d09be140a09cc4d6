"""
Run: one training job or evaluation, as seen from one process.

Lifecycle: RUNNING until finish() (or fail(), the context manager, the exit hooks) starts;
from then every log_* raises RunFinishedError. Who sets the final status (ownership.py
decides at init):

- OWNER: the process that created the run, or resumed it with an explicit `id=`: every status;
- COMPLETES: `init(kind="train", id=...)` with an id not from the environment (prime-rl's
  contract): a clean finish completes the run; a failure is logged and left to its creator;
- ATTACHED: a process that found the run in its environment (a child, a component, a non-zero
  rank, an `id=` that is the value of OPENRUNS_RUN_ID or RUN_ID): it only flushes its own
  records. Its fatal error (fail(), an exception through `with`,
  an uncaught exception) is reported to the run for the owner to name the failure with.

Console output (console.py, the `capture_console` setting): the owner tees its sys.stdout and
sys.stderr into the run's `logs` stream from init() to finish(); launchers send their
children's output through `_log_console`. The traceback of the exception that fails a run (or
ends an attached process) is sent whatever the setting: it is the failure's own report.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from . import exits, fork
from .backends.base import Backend
from .backends.offline import add_writers_losses
from .errors import ConflictError, OpenrunsError, RunFinishedError
from .identity import COMPONENT_ENV, component_name, unexport_run
from .ownership import Ownership
from .records import WithDefaults, clean_finite
from .settings import Settings
from .spec import MAX_ERROR_CHARS, MAX_STEP, ConfigSource, RunStatus, cut_text
from .upload.pipeline import Pipeline

if TYPE_CHECKING:
    from .console import ConsoleCapture

__all__ = ["Ownership", "Run"]

logger = logging.getLogger("openruns")
ALERT_LEVELS = ("info", "warn", "error")  # run.alert(); the server takes the same
# How long the console capture's drain thread waits for room in the upload queue per batch of
# lines before the rest is dropped (counted).
_CONSOLE_WAIT = 2.0


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
        ownership: Ownership,
        config_source: ConfigSource | None = None,
        run_dir: Path | None = None,
        default_name: str | None = None,
    ):
        self._id = run_id
        self._kind = kind
        self._name = name
        self._settings = settings
        self._backend = backend
        self._ownership = ownership
        self._config_source = config_source
        self._run_dir = run_dir
        # The process that may set a final status; a forked child never does.
        self._finalizer_pid: int | None = None if ownership is Ownership.ATTACHED else os.getpid()
        # A name to give the run at its close when nobody named it (a launcher's run, whose
        # components may name it first).
        self._default_name = default_name
        self._status = RunStatus.RUNNING
        self._opened_at = time.time()  # writers of the run directory closed since count here
        self._unclosed_writers = 0  # of them, those that ended without closing (killed)
        self._error: str | None = None
        self._fatal: str | None = None  # this process's fatal error, for the run's owner
        self.summary: dict[str, Any] = {}
        self._published: dict[str, Any] = {}  # the summary as last sent by flush()
        self._step = -1
        self._finish_lock = threading.RLock()
        self._finishing = False
        self._closer: threading.Thread | None = None  # the thread running the close
        self._closed = threading.Event()  # the close has ended
        self._hurried_by: float | None = None  # a signal's deadline for a close in progress
        self._raised_deferred = False
        self._pipeline: Pipeline | None = None
        if settings.mode != "disabled":
            self._pipeline = Pipeline(backend.make_sink, run_id, kind, settings.max_queued_records)
            self._pipeline.start()  # here, not in the first log call, which must stay cheap
        # System metrics (system.py): the owner samples its host and itself, others themselves.
        self._system = None
        if self._pipeline is not None and settings.system_metrics_interval > 0:
            from .system import start_sampler

            self._system = start_sampler(
                self.log_metrics,
                settings.system_metrics_interval,
                owner=ownership is Ownership.OWNER,
                disk_path=str(run_dir or settings.dir),
            )
        # Console capture (console.py): what the owning process prints goes with the run.
        self._console: ConsoleCapture | None = None
        if self._pipeline is not None and settings.capture_console and ownership is Ownership.OWNER:
            from .console import ConsoleCapture

            # Its drain thread may wait for room in the upload queue: only it waits, never the
            # caller's print(), whose text waits in the capture (bounded there).
            self._console = ConsoleCapture(
                lambda lines: self._log_console(lines, wait=_CONSOLE_WAIT), source="main"
            )
            self._console.start()
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
        """True when another process owns this run: finish() here only flushes (with
        `init(kind="train", id=...)`, a clean finish still completes the run)."""
        return self.ownership is not Ownership.OWNER

    @property
    def ownership(self) -> Ownership:
        return Ownership.ATTACHED if self._finalizer_pid != os.getpid() else self._ownership

    @property
    def owns_lifecycle(self) -> bool:
        """True when this process sets every final status of the run."""
        return self.ownership is Ownership.OWNER

    def _sets(self, status: RunStatus) -> bool:
        ownership = self.ownership
        return ownership is Ownership.OWNER or (
            ownership is Ownership.COMPLETES and status is RunStatus.COMPLETED
        )

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
    def dropped_console_chars(self) -> int:
        """Characters of console output not kept: printed faster than they could be sent
        (console capture's bound, then the upload queue's console budget)."""
        if self._pipeline is None:
            return 0
        captured = self._console.dropped_chars if self._console is not None else 0
        return captured + self._pipeline.stats.dropped_console_chars

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
        Log scalar metrics at `step`. Without `step` the row is keyed by its time only (as
        prime-runs does: periodic rows such as `inference/*`), never folded into a step. Nested
        mappings become `a/b` keys; NaN, infinities and non-numbers are dropped and named in a
        warning. Steps may repeat or go backwards; every row is kept.
        """
        if self._finishing:
            raise RunFinishedError(f"run {self._id} is finished; log_metrics() was called after")
        if not isinstance(values, Mapping):
            raise TypeError(f"values must be a mapping, got {type(values).__name__}")
        if step is not None:
            _check_step(step)
            self._step = step
        if self._pipeline is not None:
            self._pipeline.put("metrics", dict(values), 1, step, time.time())

    def define_metric(self, name: str, *, step_metric: str | None = None) -> None:
        """
        Draw metric `name` against metric `step_metric` by default on the dashboard (as W&B's
        `define_metric(name, step_metric=K)`; None: against the step). Both are metric keys as
        logged (`a/b` for nested ones). Sent at once, one bounded attempt (a failure is counted
        in `errors`); an offline run keeps it for `openruns sync`.
        """
        for label, value in (("name", name), ("step_metric", step_metric)):
            if value is None and label == "step_metric":
                continue
            if not isinstance(value, str) or not 0 < len(value) <= 1024:
                raise ValueError(f"{label} must be a metric key of 1 to 1024 characters")
        self._contain(
            "defining a metric", lambda: self._backend.define_metrics({name: step_metric})
        )

    def log_episodes(
        self,
        episodes: Iterable[Any],
        *,
        step: int | None = None,
        kind: str | None = None,
        subset: str | None = None,
    ) -> None:
        """
        Log episodes: mappings with a `traces` list, or objects with `to_record()` /
        `model_dump()`. Each episode's step is its `run.work.step` (the step it was dispatched
        at), else `step`, else the last step logged. `kind` (train | eval) and `subset` (a
        cohort such as all | effective) are stored with each episode that does not say its own
        (an episode's kind is its `run.work.type`, else its first trace's `info.kind`). The
        objects are encoded later, on the upload side; do not mutate them after.
        """
        self._log_records("episodes", episodes, step, kind, subset)

    def log_traces(
        self,
        traces: Iterable[Any],
        *,
        step: int | None = None,
        kind: str | None = None,
        subset: str | None = None,
    ) -> None:
        """Log bare traces (not wrapped in an episode); as log_episodes otherwise."""
        self._log_records("traces", traces, step, kind, subset)

    def log_annotations(self, annotations: Iterable[Mapping[str, Any]]) -> None:
        """
        Log later facts about episodes already logged (by this or any other process), each a
        mapping keyed by `episode_id`:

            run.log_annotations([{"episode_id": eid, "step": 12,          # trained at step 12
                                  "info": {"advantage": 0.4, "effective": True}}])

        Optional keys: `trace_id` (the fact is about one trace), `step` (the step the episode
        was trained at), `info` (deep-merged into the episode's or trace's `info` on read,
        newest last), `branches` (per-branch streams such as `trainer_logprobs`), `producer`
        (default `$OPENRUNS_COMPONENT`, else "main"). Stored append-only; folded on read.
        """
        if self._finishing:
            raise RunFinishedError(
                f"run {self._id} is finished; log_annotations() was called after"
            )
        if isinstance(annotations, (Mapping, str, bytes)) or not isinstance(annotations, Iterable):
            raise TypeError(
                f"log_annotations() takes an iterable of mappings, got {type(annotations).__name__}"
            )
        batch = list(annotations)
        producer = os.environ.get(COMPONENT_ENV) or "main"
        for i, annotation in enumerate(batch):
            if not isinstance(annotation, Mapping):
                raise TypeError(f"an annotation must be a mapping, got {type(annotation).__name__}")
            episode_id = annotation.get("episode_id")
            if not isinstance(episode_id, str) or not episode_id:
                raise ValueError(f"an annotation needs an episode_id string, got {episode_id!r}")
            if "producer" not in annotation:
                batch[i] = {**annotation, "producer": producer}
        if batch and self._pipeline is not None:
            self._pipeline.put("annotations", batch, len(batch), None, time.time())

    def alert(self, title: str, text: str = "", *, level: str = "info") -> None:
        """
        Send an alert from the job itself, to the webhooks of the alert rules of the run's
        team and project on the server (docs/server.md, Alerts):

            run.alert("eval regressed", f"pass@1 {score:.3f} < {best:.3f}", level="warn")

        `level` is info, warn or error. Like log_*, a cheap enqueue on the run's metrics lane:
        it never waits for the server, and an alert the queue cannot take is counted dropped.
        An offline run keeps it in its directory; `openruns sync` sends it later.
        """
        if self._finishing:
            raise RunFinishedError(f"run {self._id} is finished; alert() was called after")
        if not isinstance(title, str) or not 0 < len(title) <= 200:
            raise ValueError(f"title must be a string of 1 to 200 characters, got {title!r}")
        if not isinstance(text, str) or len(text) > 4000:
            raise ValueError("text must be a string of at most 4000 characters")
        if level not in ALERT_LEVELS:
            raise ValueError(f"level must be one of {', '.join(ALERT_LEVELS)}, got {level!r}")
        if self._pipeline is not None:
            row = {"type": "alert", "title": title, "text": text, "level": level}
            self._pipeline.put("alerts", [row], 1, None, time.time())

    def _log_records(
        self,
        stream: str,
        records: Iterable[Any],
        step: int | None,
        kind: str | None,
        subset: str | None,
    ) -> None:
        if self._finishing:
            raise RunFinishedError(f"run {self._id} is finished; log_{stream}() was called after")
        if isinstance(records, (Mapping, str, bytes)) or not isinstance(records, Iterable):
            raise TypeError(
                f"log_{stream}() takes an iterable of records, got {type(records).__name__}"
            )
        if step is not None:
            _check_step(step)
        for name, value in (("kind", kind), ("subset", subset)):
            if value is not None and (not isinstance(value, str) or not value):
                raise TypeError(f"{name} must be a non-empty string, got {value!r}")
        batch = list(records)
        if kind is not None or subset is not None:
            defaults = {k: v for k, v in (("kind", kind), ("subset", subset)) if v is not None}
            batch = [WithDefaults(record, defaults) for record in batch]
        if batch and self._pipeline is not None:
            fallback = step if step is not None else (self._step if self._step >= 0 else None)
            self._pipeline.put(stream, batch, len(batch), fallback, 0.0)

    def _log_console(self, lines: list[dict[str, Any]], wait: float = 0.0) -> None:
        """Console line records (console.py) to the run's `logs` stream; never raises, waits
        at most `wait` seconds for room (what the console budget refuses is counted in
        dropped_console_chars)."""
        if self._pipeline is not None and lines:
            self._pipeline.put_logs(lines, wait=wait)

    def _count_dropped_console(self, chars: int) -> None:
        """Console output a launcher could not keep (a followed file that grew too fast)."""
        if self._pipeline is not None:
            self._pipeline.stats.count_dropped_console_chars(chars)

    def _log_traceback(self, error: BaseException) -> None:
        """The formatted traceback of the error that ends this run (or this process's part of
        it) as one record of stream "traceback", which the Logs tab shows first."""
        if self._pipeline is None or error.__traceback__ is None:
            return
        from .console import traceback_record

        source = "main" if self.ownership is Ownership.OWNER else component_name()
        try:
            record = traceback_record(error, source)
        except Exception:  # formatting a strange exception: the error message still goes
            return
        self._pipeline.put_logs([record], budgeted=False)

    def update_summary(self, values: Mapping[str, Any]) -> None:
        """Merge `values` (non-finite numbers dropped) into the run's summary."""
        if self._finishing:
            raise RunFinishedError(f"run {self._id} is finished; update_summary() was called after")
        if not isinstance(values, Mapping):
            raise TypeError(f"values must be a mapping, got {type(values).__name__}")
        self.summary.update(clean_finite(values))

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
        self._finish(summary, RunStatus(status), error, timeout, said=True)

    def _finish(
        self,
        summary: Mapping[str, Any] | None,
        status: RunStatus,
        error: str | None,
        timeout: float | None,
        said: bool,
    ) -> None:
        """finish(); `said`: asked for by the caller (not an exit hook), so asking for another
        status once the run is closed is warned about rather than silently dropped (issue 24)."""
        if not status.is_terminal():
            raise ValueError(f"finish() needs a terminal status, got {status.value!r}")
        if error is not None:  # the run fails with a long error, cut, never with none
            error = cut_text(str(error), MAX_ERROR_CHARS)
        with self._finish_lock:
            if self._finishing:
                # Finished, or re-entered from a signal handler while finishing.
                if said and status is not self._status:
                    logger.warning(
                        "openruns: run %s is already %s; finish(status=%r) is ignored",
                        self._id,
                        self._status.value,
                        status.value,
                    )
                return
            if summary is not None:
                if not isinstance(summary, Mapping):
                    raise TypeError(f"summary must be a mapping, got {type(summary).__name__}")
                self.summary.update(clean_finite(summary))
            self._finishing = True
            self._closer = threading.current_thread()
            self._status = status
            self._error = error
            if status is RunStatus.FAILED and error and self._fatal is None:
                self._fatal = error
            self._teardown(self._settings.finish_timeout if timeout is None else timeout)
        self._raise_deferred()

    def fail(self, error: str | BaseException, *, timeout: float | None = None) -> None:
        """finish() with status failed and `error` ("<Type>: <message>" for an exception; its
        traceback goes to the run's console output, the Logs tab)."""
        self._fail(error, timeout, said=True)

    def _fail(self, error: str | BaseException, timeout: float | None, said: bool) -> None:
        if isinstance(error, BaseException) and not self._finishing:
            self._log_traceback(error)
        self._finish(None, RunStatus.FAILED, _describe(error), timeout, said)

    def _reported_error(self) -> str | None:
        """The first fatal error a process attached to this run reported (for a launcher that
        chooses the run's failure message); None when none did or it cannot be read."""
        try:
            return self._backend.reported_error()
        except Exception as exc:
            logger.warning("openruns: reading the errors reported to run %s: %s", self._id, exc)
            return None

    def _fill(self, fields: Mapping[str, Any]) -> None:
        """Set `fields` (metadata, a fatal error) on the run where it has none yet."""
        self._contain("filling in the run's metadata", lambda: self._backend.fill(dict(fields)))

    def _teardown(self, timeout: float) -> None:
        finalizes = self._sets(self._status)
        ownership = self.ownership
        deadline = time.monotonic() + timeout
        drained = True
        if self._system is not None:
            self._system.stop()
        if self._console is not None:
            self._console.stop()  # restores the streams; its last lines go in before the close
        if self._pipeline is not None:
            dropped = self.dropped_console_chars
            if dropped:
                from .console import dropped_note

                self._pipeline.put_logs([dropped_note(dropped)], budgeted=False)
            # The final status keeps a share of the budget for itself: a drain that takes it
            # all leaves the run open on the server with its losses unsaid (issue 25).
            reserve = min(self._settings.retry_timeout, timeout / 4) if finalizes else 0.0
            drained = self._pipeline.close(timeout - reserve)
            sink = self._pipeline.sink
            self._contain(
                "recording this process's losses",
                lambda: self._backend.close_writer(
                    getattr(sink, "writer_id", None), self._pipeline.stats, self.dropped_records
                ),
            )
        if finalizes:
            if self._default_name is not None:
                self._fill({"name": self._default_name})
            hurried_by = self._hurried_by or deadline  # a signal may have hurried the close
            self._contain("finalizing the run", lambda: self._finalize(min(deadline, hurried_by)))
        else:
            if self._fatal is not None:
                fatal = f"{self._fatal} ({component_name()})"
                self._fill({"error": cut_text(fatal, MAX_ERROR_CHARS)})
            if ownership is Ownership.COMPLETES:
                logger.warning(
                    "openruns: run %s is %s here; that status is left to the launcher or "
                    "scheduler that created the run (this process attached with id=)",
                    self._id,
                    self._status.value,
                )
        if ownership is Ownership.OWNER:
            unexport_run(self._id)
        self._contain("closing the connection", self._backend.close)
        self._report_losses(drained)
        self._closed.set()
        exits.closed(self)  # last: delivers a signal that came during this close (exits.py)

    def _finalize(self, deadline: float) -> None:
        wished = self._status
        losses = self._losses()
        self._unclosed_writers = losses.get("unclosed_writers", 0)
        standing = self._backend.finalize(self._status, self._error, self.summary, losses, deadline)
        if standing is not None and standing[0] is not wished:
            # Another process closed the run first (issue 25): this one reports what stands.
            self._status, self._error = standing
            self._pipeline_or_log(
                "closing the run",
                ConflictError(
                    f"run {self._id} was already {standing[0].value} (closed by another "
                    f"process), so it stays {standing[0].value}; this process's "
                    f"{wished.value} was not applied",
                    409,
                    "run_finished",
                ),
            )

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
            if self.dropped_console_chars:
                losses["dropped_console_chars"] = self.dropped_console_chars
            if self._run_dir is not None:
                writer = getattr(self._pipeline.sink, "writer_id", None)
                losses = add_writers_losses(losses, self._run_dir, self._opened_at, writer)
                if losses.get("spooled_records"):  # where `openruns sync` finds them (issue 25)
                    losses["spool"] = {"host": socket.gethostname(), "dir": str(self._run_dir)}
        return losses

    def _report_losses(self, drained: bool) -> None:
        if self.dropped_console_chars:
            logger.warning(
                "openruns: run %s did not keep %d characters of console output: more was "
                "printed than could wait to be sent (counted in its losses as "
                "dropped_console_chars)",
                self._id,
                self.dropped_console_chars,
            )
        if self.dropped_records or self.failed_records:
            logger.warning(
                "openruns: run %s lost records: %d dropped, failed %s%s",
                self._id,
                self.dropped_records,
                self.failed_records or "{}",
                "" if drained else " (uploads had not drained by the deadline)",
            )
        if self._unclosed_writers:
            logger.warning(
                "openruns: run %s: %d of the processes that wrote to it ended without closing "
                "it (killed?): what they had not delivered is lost and was not counted "
                "(unclosed_writers in its losses)",
                self._id,
                self._unclosed_writers,
            )

    def _finish_quietly(
        self,
        status: RunStatus,
        error: str,
        timeout: float | None,
        fatal: str | None = None,
        exception: BaseException | None = None,
    ) -> bool:
        """finish() for the exit hooks: never raises; the drain budget is the smaller one.
        `fatal`: the uncaught exception that ends the process, reported to the run's owner;
        `exception`: that exception, whose traceback goes to the run's console output.
        A close already under way (finish() draining when a signal came) is hurried to end
        within the budget instead: True when it runs on the calling thread, which must then
        return to it (the signal handler, exits.py); another thread's close is waited for."""
        budget = self._settings.finish_timeout
        if timeout is not None:
            budget = min(budget, timeout)
        if self._finishing and not self._closed.is_set():
            self._hurry(budget)
            if self._closer is threading.current_thread():
                return True
            self._closed.wait(budget)
            return False
        if fatal is not None and self._fatal is None:
            self._fatal = fatal
        if exception is not None and not self._finishing:
            self._log_traceback(exception)
        try:
            self._finish(None, status, error, budget, said=False)
        except Exception:
            logger.exception("openruns: closing run %s at exit failed", self._id)
        return False

    def _hurry(self, timeout: float) -> None:
        """The close under way ends within `timeout` s: what is not sent by then is spooled
        (the final status keeps its share, as in _teardown)."""
        reserve = min(self._settings.retry_timeout, timeout / 4) if self._sets(self._status) else 0
        now = time.monotonic()
        self._hurried_by = min(now + timeout, self._hurried_by or now + timeout)
        if self._pipeline is not None:
            self._pipeline.hurry(now + timeout - reserve)

    def _contain(self, what: str, action: Any) -> None:
        try:
            action()
        except Exception as exc:
            self._pipeline_or_log(what, exc)

    def _pipeline_or_log(self, what: str, exc: Exception) -> None:
        """Name a failure in `errors` (a disabled run has none: a warning)."""
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

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        try:
            # Quiet when the body already closed the run (e.g. with fail()): that status stays.
            if exc is None:
                self._finish(None, RunStatus.COMPLETED, None, None, said=False)
            elif isinstance(exc, (KeyboardInterrupt, asyncio.CancelledError)):
                error = f"interrupted ({exc_type.__name__})"
                self._finish(None, RunStatus.CANCELLED, error, None, said=False)
            else:
                self._fail(exc, None, said=False)
        except OpenrunsError:
            if exc is None:
                raise
            logger.exception("openruns: closing run %s failed", self._id)
        return False

    def _after_fork_in_child(self) -> None:
        # The child joins the run but never sets its status (its pid is not the finalizer's);
        # the pipeline resets itself.
        self._finish_lock = threading.RLock()
        self._closed = threading.Event()

    def __repr__(self) -> str:
        return f"<openruns.Run id={self._id!r} kind={self._kind} status={self._status.value}>"


def _describe(error: str | BaseException) -> str:
    if isinstance(error, BaseException):
        return f"{type(error).__name__}: {error}"
    return str(error)


def _check_step(step: object) -> None:
    """A step is an int from 0 to MAX_STEP: refused at the call, not in a batch the server
    would refuse whole."""
    if not isinstance(step, int) or isinstance(step, bool):
        raise TypeError(f"step must be an int or None, got {type(step).__name__}")
    if not 0 <= step <= MAX_STEP:
        raise ValueError(f"step must be from 0 to {MAX_STEP}, got {step}")
