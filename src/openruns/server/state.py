"""
What a running server holds: its settings, the store, the blob store and the limiters. One per
app, on `app.state.server`; handlers reach it through `server_state(request)`.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from .config import ServerSettings
from .limits import IngestGate, RateLimiter
from .store import BlobStore, LocalBlobStore, Store

__all__ = ["ServerState", "server_state"]


@dataclass
class ServerState:
    settings: ServerSettings
    auth_enabled: bool
    store: Store
    blobs: BlobStore
    limiter: RateLimiter
    gate: IngestGate

    @classmethod
    def open(cls, settings: ServerSettings) -> ServerState:
        """Check the settings, open (and migrate) the store; errors say what to fix."""
        auth_enabled = settings.auth_enabled()
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        blobs = LocalBlobStore(settings.blob_dir)
        store = Store.open(
            settings.database_url,
            heartbeat_timeout=settings.heartbeat_timeout,
            query_timeout=settings.query_timeout,
        )
        return cls(
            settings=settings,
            auth_enabled=auth_enabled,
            store=store,
            blobs=blobs,
            limiter=RateLimiter(settings.rate_limit, settings.rate_burst),
            gate=IngestGate(settings.max_ingest_requests, settings.max_ingest_bytes),
        )

    def close(self) -> None:
        self.store.close()

    def run_url(self, run_id: str) -> str:
        path = f"/runs/{run_id}"
        return self.settings.public_url.rstrip("/") + path if self.settings.public_url else path


def server_state(request: Request) -> ServerState:
    return request.app.state.server
