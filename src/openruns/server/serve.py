"""
Running the server: in the foreground (`openruns server`) or on a thread (tests, scripts).

    handle = serve_in_thread("/tmp/data")          # 127.0.0.1, a free port
    httpx.get(handle.url + "/api/v1/health")
    handle.stop()

The socket is bound and the stores opened before uvicorn starts, so a port in use, a bad data
directory, an unreachable database or bucket or an unsafe bind fail at once with one clear
error instead of inside uvicorn.
"""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn

from .access_log import log_to_stderr
from .app import create_app
from .config import ServerConfigError, ServerSettings
from .state import ServerState
from .store.db import describe_url

__all__ = ["ServerHandle", "bind", "serve", "serve_in_thread", "start", "url_of"]


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (port 0: a free one)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _server(app: Any, log_level: str) -> uvicorn.Server:
    config = uvicorn.Config(
        app,
        http="h11",
        lifespan="on",
        log_level=log_level,
        access_log=False,
        # X-Forwarded-* are believed only from --trusted-proxies (security.install_security);
        # uvicorn's own default would believe them from any loopback client.
        proxy_headers=False,
        # SDK owners heartbeat every 15 s on a kept-alive connection: uvicorn's default of 5 s
        # closed it between beats, and reconnecting cost each client ~10 ms of CPU per beat.
        timeout_keep_alive=75,
        timeout_graceful_shutdown=5,
    )
    return uvicorn.Server(config)


def start(settings: ServerSettings) -> tuple[socket.socket, ServerState]:
    """Bind the socket and open the store; ServerConfigError says what failed, in one line."""
    settings.auth_enabled()  # refuse an unsafe bind before touching anything
    try:
        sock = bind(settings.host, settings.port)
    except OSError as exc:
        raise ServerConfigError(
            f"cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}"
        ) from exc
    try:
        state = ServerState.open(settings)
    except BaseException:
        sock.close()
        raise
    return sock, state


def serve(settings: ServerSettings) -> None:
    """Serve in the foreground until interrupted; print the URL once listening."""
    sock, state = start(settings)
    server = _server(create_app(settings, state), log_level="warning")
    if settings.access_log > 0:
        log_to_stderr()
    auth = "API keys required" if state.auth_enabled else "auth off"
    print(f"openruns server listening on {url_of(sock)}", flush=True)
    database = describe_url(settings.database_url or state.store.db.url)
    where = f"metadata in {database}, blobs in {state.blobs.describe()}"
    print(f"{where} ({auth}); API docs at /api/v1/docs", flush=True)
    server.run(sockets=[sock])


@dataclasses.dataclass
class ServerHandle:
    """A server running on a thread of this process."""

    url: str
    server: uvicorn.Server
    thread: threading.Thread
    sock: socket.socket

    def stop(self, timeout: float = 10.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)
        self.sock.close()

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_in_thread(
    data_dir: str | Path | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    startup_timeout: float = 30.0,
    **settings: Any,
) -> ServerHandle:
    """Start a server on a daemon thread; returns once it accepts requests. `settings` are
    further ServerSettings fields (auth, heartbeat_timeout, database_url, blobs, ...); without
    `data_dir`, both `database_url` and `blobs` must be given."""
    if data_dir is not None:
        settings["data_dir"] = Path(data_dir)
    elif not (settings.get("database_url") and settings.get("blobs")):
        raise ValueError("serve_in_thread needs data_dir, or both database_url and blobs")
    config = ServerSettings(host=host, port=port, **settings)
    sock, state = start(config)
    server = _server(create_app(config, state), log_level="warning")
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="openruns-server", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            sock.close()
            raise RuntimeError("the openruns server did not start; see the log above")
        time.sleep(0.01)
    return ServerHandle(url_of(sock), server, thread, sock)
