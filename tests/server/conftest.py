from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from openruns.server import ServerHandle, serve_in_thread

from .helpers import api


@pytest.fixture
def make_server(tmp_path) -> Iterator:
    """Start servers on 127.0.0.1 (free ports, data under tmp_path) with ServerSettings fields."""
    handles: list[ServerHandle] = []

    def make(**settings) -> ServerHandle:
        data_dir = settings.pop("data_dir", tmp_path / f"data-{len(handles)}")
        handle = serve_in_thread(data_dir, **settings)
        handles.append(handle)
        return handle

    yield make
    for handle in handles:
        handle.stop()


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory) -> Iterator[ServerHandle]:
    """One auth-off server for a module's tests (each test makes its own runs)."""
    handle = serve_in_thread(tmp_path_factory.mktemp("server-data"))
    yield handle
    handle.stop()


@pytest.fixture
def client(shared_server) -> Iterator[httpx.Client]:
    with api(shared_server.url) as http:
        yield http
