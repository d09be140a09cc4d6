"""
Server fixtures. The suite runs against both store configurations: `backend` is a module
param ("sqlite": one data directory; "postgres": PostgreSQL + an S3 bucket, see
tests/services.py), so every test that starts a server runs on each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest

from openruns.server import ServerHandle, serve_in_thread

from ..services import BACKENDS, Stores, StoresFactory
from .helpers import api, new_key


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture
def new_stores(backend, stores_factory: StoresFactory, tmp_path) -> Iterator[Callable[[], Stores]]:
    """Fresh, empty stores of this test's backend (a new data dir, or database + bucket);
    given back when the test ends (its servers stopped: make_server's teardown comes first)."""
    count = iter(range(1000))
    made: list[Stores] = []

    def make() -> Stores:
        made.append(stores_factory.new(backend, tmp_path / f"data-{next(count)}"))
        return made[-1]

    yield make
    for stores in made:
        stores_factory.release(stores)


@pytest.fixture
def make_server(new_stores) -> Iterator[Callable[..., ServerHandle]]:
    """Start servers on 127.0.0.1 (free ports) with ServerSettings fields; `stores=` shares
    one deployment's stores between servers (replicas), else each gets fresh ones."""
    handles: list[ServerHandle] = []

    def make(stores: Stores | None = None, **settings) -> ServerHandle:
        stores = stores or new_stores()
        handle = serve_in_thread(**stores.settings, **settings)
        handles.append(handle)
        return handle

    yield make
    for handle in handles:
        handle.stop()


@pytest.fixture(scope="module")
def shared_server(backend, stores_factory: StoresFactory, tmp_path_factory) -> Iterator:
    """One auth-off server for a module's tests (each test makes its own runs)."""
    stores = stores_factory.new(backend, tmp_path_factory.mktemp("server-data"))
    handle = serve_in_thread(**stores.settings)
    yield handle
    handle.stop()
    stores_factory.release(stores)


@pytest.fixture
def client(shared_server) -> Iterator[httpx.Client]:
    with api(shared_server.url) as http:
        yield http


@pytest.fixture
def teams(make_server, new_stores, capsys):
    """A server with auth on and a key for each of two teams: (server, {team: key}, stores)."""
    stores = new_stores()
    keys = {team: new_key(stores, team, capsys) for team in ("red", "blue")}
    return make_server(stores, auth=True), keys, stores
