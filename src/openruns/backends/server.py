"""
Online runs: the run lives on an openruns server. A local run directory (`<dir>/<run id>/`)
keeps the run's metadata and status and is the upload spool, so `openruns sync` can finish
whatever the process could not: create the run, upload spooled batches, set the final status.

The run id is chosen here, so creating it is idempotent: when the server cannot be reached at
init(), the run opens anyway (with a warning) and is created by the first upload that gets
through; records wait in the spool meanwhile. A wrong key or a bad request still fails init().
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

from ..errors import APIError, ConflictError
from ..rundir import new_writer_id
from ..settings import Settings
from ..sinks.server import ServerSink
from ..spec import RunStatus
from ..upload import fork
from ..upload.http import ApiClient, retryable, retrying
from ..upload.stats import Stats
from .offline import OfflineBackend

__all__ = ["ServerBackend"]

logger = logging.getLogger("openruns")

CONNECT_PATIENCE = 10.0  # how long init() tries to reach the server before going on without it
FINISH_PATIENCE = 15.0
UPDATE_TIMEOUT = 5.0
DEFAULT_HEARTBEAT = 30.0


class ServerBackend:
    def __init__(
        self,
        settings: Settings,
        client: ApiClient,
        run_id: str,
        local: OfflineBackend,
        *,
        owner: bool,
        metadata: dict[str, Any] | None,
        server_info: dict[str, Any] | None,
    ):
        assert settings.base_url
        self.settings = settings
        self.client = client
        self.run_id = run_id
        self.local = local
        self.url = f"{settings.base_url}/runs/{run_id}"
        self.token: str | None = None
        self._metadata = metadata  # set while the run still has to be created on the server
        info = server_info or {}
        self._gzip_only = "zstd" not in info.get("encodings", ["zstd"])
        timeout = float(info.get("heartbeat_timeout") or 4 * DEFAULT_HEARTBEAT)
        self._heartbeat_every = min(DEFAULT_HEARTBEAT, timeout / 4)
        self._stop_heartbeat = threading.Event()
        if owner:
            self._start_heartbeat()
        fork.register(self)

    @classmethod
    def create(
        cls, settings: Settings, run_id: str, run_dir: Path, metadata: dict[str, Any]
    ) -> ServerBackend:
        assert settings.base_url
        client = ApiClient(settings.base_url, settings.api_key)
        deadline = time.monotonic() + CONNECT_PATIENCE
        info: dict[str, Any] | None = None
        created: dict[str, Any] | None = None
        try:
            info = retrying(lambda: client.request("GET", "/health"), deadline=deadline)
            created = retrying(lambda: _create(client, run_id, metadata), deadline=deadline)
        except APIError as exc:
            if not retryable(exc):
                client.close()
                raise
            logger.warning(
                "openruns: the server at %s did not answer (%s); run %s is opened anyway and "
                "will be created there as soon as it answers; records wait in %s",
                settings.base_url,
                exc,
                run_id,
                run_dir,
            )
        local = OfflineBackend.create(run_dir, {**metadata, "server": settings.base_url})
        backend = cls(
            settings,
            client,
            run_id,
            local,
            owner=True,
            metadata=None if created else metadata,
            server_info=info,
        )
        if created:
            backend.token = created.get("token")
            backend.url = _absolute(settings.base_url, created.get("url")) or backend.url
        return backend

    @classmethod
    def attach(cls, settings: Settings, run_id: str, run_dir: Path) -> ServerBackend:
        assert settings.base_url
        client = ApiClient(settings.base_url, settings.api_key)
        return cls(
            settings,
            client,
            run_id,
            OfflineBackend.attach(run_dir),
            owner=False,
            metadata=None,
            server_info=None,
        )

    def make_sink(self, stats: Stats) -> ServerSink:
        return ServerSink(
            self.client,
            self.run_id,
            self.local.run_dir,
            new_writer_id(),
            stats,
            spool_bytes=self.settings.spool_bytes,
            gzip_only=self._gzip_only,
            before_first_send=self._ensure_created if self._metadata is not None else None,
        )

    def _ensure_created(self) -> None:
        if self._metadata is None:
            return
        created = _create(self.client, self.run_id, self._metadata)
        self.token = created.get("token")
        self._metadata = None

    def update(self, summary: dict[str, Any]) -> None:
        self.local.update(summary)
        if self._metadata is None:
            # One short attempt: flush() is bounded by its caller; finish() sends it again.
            self.client.request(
                "PATCH", f"/runs/{self.run_id}", json={"summary": summary}, timeout=UPDATE_TIMEOUT
            )

    def fill(self, fields: dict[str, Any]) -> None:
        """PATCH `fields` where the run has none (its name, a component's error, ...). One
        bounded attempt: init() and a process's exit path must not wait long on a server."""
        if self.local.owner:
            self.local.fill(fields)  # so `openruns sync` creates the run with them

        def send() -> Any:
            self._ensure_created()
            return self.client.request(
                "PATCH", f"/runs/{self.run_id}", json={"fill": fields}, timeout=UPDATE_TIMEOUT
            )

        retrying(send, deadline=time.monotonic() + UPDATE_TIMEOUT)

    def reported_error(self) -> str | None:
        if self._metadata is not None:
            return None  # never created on the server: nobody could report there
        run = retrying(
            lambda: self.client.request("GET", f"/runs/{self.run_id}", timeout=UPDATE_TIMEOUT),
            deadline=time.monotonic() + UPDATE_TIMEOUT,
        )
        error = run.get("error") if run.get("status") == "running" else None
        return error if isinstance(error, str) and error else None

    def finalize(
        self, status: RunStatus, error: str | None, summary: dict[str, Any], losses: dict[str, Any]
    ) -> None:
        self._stop_heartbeat.set()
        self.local.finalize(status, error, summary, losses)  # so `openruns sync` can finish it
        body = {"status": status.value, "error": error, "summary": summary, "losses": losses}
        deadline = time.monotonic() + FINISH_PATIENCE

        def finish() -> Any:
            self._ensure_created()
            return self.client.request("POST", f"/runs/{self.run_id}/finish", json=body)

        try:
            retrying(finish, deadline=deadline)
        except ConflictError as exc:
            logger.warning(
                "openruns: run %s was already closed on the server: %s", self.run_id, exc
            )
        except APIError as exc:
            raise APIError(
                f"{exc} (the final status is kept in {self.local.run_dir}; "
                f"`openruns sync {self.local.run_dir}` sets it later)",
                exc.status_code,
                exc.code,
            ) from exc

    def close_writer(self, writer_id: str | None, stats: Stats, dropped: int) -> None:
        self.local.close_writer(writer_id, stats, dropped)

    def close(self) -> None:
        self._stop_heartbeat.set()
        self.client.close()

    # -- heartbeats ---------------------------------------------------------------------------

    def _start_heartbeat(self) -> None:
        threading.Thread(target=self._beat, name="openruns-heartbeat", daemon=True).start()

    def _beat(self) -> None:
        stop = self._stop_heartbeat
        while not stop.wait(self._heartbeat_every):
            if self._metadata is not None:
                continue  # not created yet; the first upload that gets through creates it
            try:
                self.client.request("POST", f"/runs/{self.run_id}/heartbeat")
            except APIError as exc:
                logger.debug("openruns: heartbeat of run %s failed: %s", self.run_id, exc)

    def _after_fork_in_child(self) -> None:
        # The child is attached: it never heartbeats for the owner, and gets its own pool.
        self._stop_heartbeat = threading.Event()
        self._stop_heartbeat.set()
        self.client.drop()


def _create(client: ApiClient, run_id: str, metadata: dict[str, Any]) -> dict[str, Any]:
    body = {k: v for k, v in metadata.items() if v is not None}
    body["id"] = run_id
    return client.request("POST", "/runs", json=body, headers={"Idempotency-Key": run_id})


def _absolute(base_url: str, url: Any) -> str | None:
    if not isinstance(url, str) or not url:
        return None
    return url if "://" in url else base_url + url
