"""
What a running server holds: its settings, the store, the blob store and the limiters. One per
app, on `app.state.server`; handlers reach it through `server_state(request)`.

Nothing here is shared between replicas but the database and the blob store, so any number of
processes can serve one deployment. (Rate limits and the ingest gate count per process.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from starlette.requests import Request

from .admission import IngestGate
from .config import ServerConfigError, ServerSettings
from .limits import SIGN_IN_BURST, SIGN_IN_RATE, RateLimiter
from .parse_workers import ParseWorkers
from .store import BlobStore, Store, open_blobs
from .store.db import describe_url

__all__ = ["ServerState", "open_stores", "server_state"]


@dataclass
class ServerState:
    settings: ServerSettings
    auth_enabled: bool
    store: Store
    blobs: BlobStore
    limiter: RateLimiter
    gate: IngestGate
    # None of its own: every metrics upload is parsed in the server (`open` gives it its pool).
    parsers: ParseWorkers = field(default_factory=lambda: ParseWorkers(0))
    sign_in_limiter: RateLimiter = field(
        default_factory=lambda: RateLimiter(
            SIGN_IN_RATE, SIGN_IN_BURST, what="sign-in attempts from this address"
        )
    )

    @classmethod
    def open(cls, settings: ServerSettings) -> ServerState:
        """Check the settings, open (and migrate) the store, reach the blob store.
        ServerConfigError says, in one line, which of them failed and why."""
        auth_enabled = settings.auth_enabled()
        store, blobs = open_stores(settings)
        return cls(
            settings=settings,
            auth_enabled=auth_enabled,
            store=store,
            blobs=blobs,
            limiter=RateLimiter(settings.rate_limit, settings.rate_burst),
            gate=IngestGate(
                settings.max_ingest_requests,
                settings.max_ingest_bytes,
                per_owner=settings.max_ingest_per_caller,
                idle_after=settings.body_idle_timeout / 4,
                queue_wait=settings.ingest_queue_wait,
            ),
            parsers=ParseWorkers(settings.parse_workers),
        )

    def close(self) -> None:
        self.parsers.close()
        self.store.close()

    def run_url(self, run_id: str) -> str:
        path = f"/runs/{run_id}"
        return self.settings.public_url.rstrip("/") + path if self.settings.public_url else path


def open_stores(settings: ServerSettings) -> tuple[Store, BlobStore]:
    """The database (migrated) and the blob store of `settings`; ServerConfigError says, in
    one line, which of them cannot be used and why."""
    url = settings.sqlalchemy_url()
    if settings.uses_data_dir():
        try:
            settings.data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ServerConfigError(
                f"cannot open the data directory {settings.data_dir}: {_reason(exc)}"
            ) from exc
    try:
        blobs = open_blobs(settings.blob_location(), settings.s3_endpoint_url)
    except ImportError as exc:
        raise _missing_extra(exc, "s3") from exc
    except (OSError, ValueError) as exc:
        raise ServerConfigError(
            f"cannot use the blob store {settings.blob_location()}: {_reason(exc)}"
        ) from exc
    try:
        store = Store.open(
            url,
            heartbeat_timeout=settings.heartbeat_timeout,
            query_timeout=settings.query_timeout,
            pool_size=settings.db_pool_size,
            pool_timeout=settings.db_pool_timeout,
        )
    except ImportError as exc:
        raise _missing_extra(exc, "postgres") from exc
    except Exception as exc:
        raise ServerConfigError(
            f"cannot open the database {describe_url(settings.database_url or url)}: {_reason(exc)}"
        ) from exc
    return store, blobs


def server_state(request: Request) -> ServerState:
    state: ServerState = request.app.state.server
    return state


def _reason(exc: BaseException) -> str:
    """The first line of what went wrong, without SQLAlchemy's wrapping."""
    inner = getattr(exc, "orig", None) or exc
    text = getattr(inner, "strerror", None) or str(inner).strip() or type(inner).__name__
    return text.splitlines()[0]


def _missing_extra(exc: ImportError, extra: str) -> ServerConfigError:
    return ServerConfigError(
        f"{exc.name or 'a driver'} is not installed: pip install '.[server,{extra}]' in a "
        f"checkout, or the same extras from the git URL (README, Install)"
    )
