"""
Online runs: the run lives on an openruns server. A local run directory (`<dir>/<run id>/`)
keeps the run's metadata and status and is the upload spool, so `openruns sync` can finish
whatever the process could not: create the run, upload spooled batches, set the final status.

The run id is chosen here, so creating it is idempotent: when the server cannot be reached at
init(), the run opens anyway (with a warning) and is created by the first upload that gets
through; records wait in the spool meanwhile. A refused connection is not waited for (nothing
listens there). A wrong key, a bad request or a wrong base_url (no openruns API at that path,
https:// to a plain HTTP server) still fails init().
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

from .. import fork
from ..errors import (
    APIError,
    ConfigurationError,
    ConflictError,
    NotFoundError,
    TLSError,
)
from ..rundir import Spool, new_writer_id, remove_delivered
from ..settings import DEFAULT_DIR, Settings
from ..sinks.server import ServerSink
from ..spec import RunStatus
from ..upload.stats import Stats
from ..wire import Disposition, WireClient, disposition, retrying
from .offline import OfflineBackend, open_writer

__all__ = ["ServerBackend"]

logger = logging.getLogger("openruns")

# Owners heartbeat three times per server timeout (it says which in /health), at most this
# often apart: a beat costs a client ~5-10 ms of CPU, the most an idle run spends.
MAX_HEARTBEAT_INTERVAL = 15.0
# The final status is retried this often at most: one small call, whose failure leaves the run
# open on the server, gets every chance its budget allows (issue 25: at 60 % faults).
CLOSE_RETRY_SECONDS = 0.5


class ServerBackend:
    def __init__(
        self,
        settings: Settings,
        wire: WireClient,
        run_id: str,
        local: OfflineBackend,
        *,
        owner: bool,
        metadata: dict[str, Any] | None,
        server_info: dict[str, Any] | None,
        silent_since: float | None = None,
    ):
        assert settings.base_url
        self.settings = settings
        self.wire = wire
        self.run_id = run_id
        self.local = local
        self.url = f"{settings.base_url}/runs/{run_id}"
        self.token: str | None = None
        self._metadata = metadata  # set while the run still has to be created on the server
        self._silent_since = silent_since  # the server has not answered since (monotonic)
        info = server_info or {}
        timeout = float(info.get("heartbeat_timeout") or 3 * MAX_HEARTBEAT_INTERVAL)
        self._heartbeat_every = min(MAX_HEARTBEAT_INTERVAL, timeout / 3)
        self._stop_heartbeat = threading.Event()
        self._sink: ServerSink | None = None
        if owner:
            self._start_heartbeat()
        fork.register(self)

    @classmethod
    def create(
        cls, settings: Settings, run_id: str, run_dir: Path, metadata: dict[str, Any]
    ) -> ServerBackend:
        assert settings.base_url
        wire = WireClient.from_settings(settings)
        started = time.monotonic()
        deadline = started + settings.init_timeout
        info: dict[str, Any] | None = None
        created: dict[str, Any] | None = None
        try:
            info = _first_health(wire, deadline)
            created = retrying(lambda: _create(wire, run_id, metadata), deadline=deadline)
        except APIError as exc:
            if disposition(exc) is not Disposition.RETRY:
                wire.close()
                if info is None and isinstance(exc, (NotFoundError, TLSError)):
                    raise ConfigurationError(str(exc)) from exc  # a wrong base_url (issue 24)
                raise
            refused = getattr(exc, "refused", False)
            logger.warning(
                "openruns: the server at %s %s (%s); run %s is opened anyway and "
                "will be created there as soon as it answers; records wait in %s",
                settings.base_url,
                "refused the connection: nothing listens there" if refused else "did not answer",
                exc,
                run_id,
                run_dir,
            )
        local = OfflineBackend.create(run_dir, {**metadata, "server": settings.base_url})
        backend = cls(
            settings,
            wire,
            run_id,
            local,
            owner=True,
            metadata=None if created else metadata,
            server_info=info,
            silent_since=None if info else started,
        )
        if created:
            backend.token = created.get("token")
            backend.url = _absolute(settings.base_url, created.get("url")) or backend.url
        return backend

    @classmethod
    def attach(cls, settings: Settings, run_id: str, run_dir: Path) -> ServerBackend:
        assert settings.base_url
        return cls(
            settings,
            WireClient.from_settings(settings),
            run_id,
            OfflineBackend.attach(run_dir),
            owner=False,
            metadata=None,
            server_info=None,
        )

    def make_sink(self, stats: Stats) -> ServerSink:
        spool = Spool(self.local.run_dir, new_writer_id(), self.settings.spool_bytes)
        open_writer(self.local.run_dir, spool.writer_id)
        self._sink = ServerSink(
            self.wire,
            self.run_id,
            spool,
            stats,
            memory_bytes=self.settings.upload_buffer_bytes,
            give_up_after=self.settings.silent_server_timeout,
            silent_since=self._silent_since,
            before_first_send=self._ensure_created if self._metadata is not None else None,
        )
        return self._sink

    def _ensure_created(self) -> None:
        if self._metadata is None:
            return
        created = _create(self.wire, self.run_id, self._metadata)
        self.token = created.get("token")
        self._metadata = None

    def update(self, summary: dict[str, Any]) -> None:
        self.local.update(summary)
        if self._metadata is None:
            # One short attempt: flush() is bounded by its caller; finish() sends it again.
            self.wire.patch_run(
                self.run_id, {"summary": summary}, timeout=self.settings.metadata_timeout
            )

    def define_metrics(self, axes: dict[str, str | None]) -> None:
        """PATCH the step metrics, one bounded attempt (kept in run.json too, for sync)."""
        self.local.define_metrics(axes)
        patience = self.settings.metadata_timeout

        def send() -> Any:
            self._ensure_created()
            return self.wire.patch_run(self.run_id, {"step_metrics": axes}, timeout=patience)

        retrying(send, deadline=time.monotonic() + patience)

    def fill(self, fields: dict[str, Any]) -> None:
        """PATCH `fields` where the run has none (its name, a component's error, ...). One
        bounded attempt: init() and a process's exit path must not wait long on a server."""
        if self.local.owner:
            self.local.fill(fields)  # so `openruns sync` creates the run with them

        patience = self.settings.metadata_timeout

        def send() -> Any:
            self._ensure_created()
            return self.wire.patch_run(self.run_id, {"fill": fields}, timeout=patience)

        retrying(send, deadline=time.monotonic() + patience)

    def reported_error(self) -> str | None:
        if self._metadata is not None:
            return None  # never created on the server: nobody could report there
        patience = self.settings.metadata_timeout
        run = retrying(
            lambda: self.wire.get_run(self.run_id, timeout=patience),
            deadline=time.monotonic() + patience,
        )
        error = run.get("error") if run.get("status") == "running" else None
        return error if isinstance(error, str) and error else None

    def finalize(
        self,
        status: RunStatus,
        error: str | None,
        summary: dict[str, Any],
        losses: dict[str, Any],
        deadline: float | None = None,
    ) -> tuple[RunStatus, str | None] | None:
        """
        Close the run: first in run.json (so `openruns sync` can set the status if the server
        never hears it), then on the server, retried every half second or so (one small call,
        issue 25) until acknowledged or `deadline` (one attempt when the uploads found the
        server down and it answered nothing during their close: it is not waited for twice).
        When another process closed the run first with another status (409), that standing
        status and its error are returned.
        """
        self._stop_heartbeat.set()
        self.local.finalize(status, error, summary, losses)
        body = {"status": status.value, "error": error, "summary": summary, "losses": losses}
        if deadline is None:
            deadline = time.monotonic() + self.settings.retry_timeout
        if self._sink is not None and self._sink.unanswered_at_close:
            deadline = time.monotonic()

        def finish() -> Any:
            self._ensure_created()
            return self.wire.finish_run(self.run_id, body)

        standing = None
        try:
            retrying(finish, deadline=deadline, max_backoff=CLOSE_RETRY_SECONDS)
        except ConflictError:
            standing = self._standing_status()  # the run's status is settled all the same
        except APIError as exc:
            raise APIError(
                f"{exc} (the final status is kept in {self.local.run_dir}; "
                f"`openruns sync {self.local.run_dir}` sets it later)",
                exc.status_code,
                exc.code,
            ) from exc
        # Nothing is left that `openruns sync` could send: the directory goes (issue 24).
        run_dir = self.local.run_dir
        remove_delivered(run_dir, parent=run_dir.parent.name == DEFAULT_DIR)
        return standing

    def _standing_status(self) -> tuple[RunStatus, str | None]:
        """The status another process closed the run with (read once more, briefly)."""
        patience = self.settings.metadata_timeout
        run = retrying(
            lambda: self.wire.get_run(self.run_id, timeout=patience),
            deadline=time.monotonic() + patience,
        )
        return RunStatus(run["status"]), run.get("error")

    def close_writer(self, writer_id: str | None, stats: Stats, dropped: int) -> None:
        self.local.close_writer(writer_id, stats, dropped)

    def close(self) -> None:
        self._stop_heartbeat.set()
        self.wire.close()

    # -- heartbeats ---------------------------------------------------------------------------

    def _start_heartbeat(self) -> None:
        threading.Thread(target=self._beat, name="openruns-heartbeat", daemon=True).start()

    def _beat(self) -> None:
        stop = self._stop_heartbeat
        while not stop.wait(self._heartbeat_every):
            if self._metadata is not None:
                continue  # not created yet; the first upload that gets through creates it
            try:
                self.wire.heartbeat(self.run_id)
            except APIError as exc:
                logger.debug("openruns: heartbeat of run %s failed: %s", self.run_id, exc)

    def _after_fork_in_child(self) -> None:
        # The child is attached: it never heartbeats for the owner, and gets its own pool.
        self._stop_heartbeat = threading.Event()
        self._stop_heartbeat.set()
        self.wire.drop()


def _first_health(wire: WireClient, deadline: float) -> dict[str, Any]:
    """The server's /health, retried until `deadline`, but not when the connection is refused:
    nothing listens there, so the run spools at once rather than block init() (issue 24)."""
    try:
        return wire.health()
    except APIError as exc:
        if disposition(exc) is not Disposition.RETRY or getattr(exc, "refused", False):
            raise
    return retrying(wire.health, deadline=deadline)


def _create(wire: WireClient, run_id: str, metadata: dict[str, Any]) -> dict[str, Any]:
    body = {k: v for k, v in metadata.items() if v is not None}
    body["id"] = run_id
    return wire.create_run(body, key=run_id)


def _absolute(base_url: str, url: Any) -> str | None:
    if not isinstance(url, str) or not url:
        return None
    return url if "://" in url else base_url + url
