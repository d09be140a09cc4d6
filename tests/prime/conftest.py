"""A real `openruns server` process on loopback for the Prime drop-in tests (one per module)."""

from __future__ import annotations

import pytest

from openruns.api import Client
from tests.server.helpers import ServerProcess


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc = ServerProcess(tmp_path_factory.mktemp("prime") / "data").start()
    yield proc
    proc.stop()


@pytest.fixture
def client(server):
    with Client(base_url=server.url) as native:
        yield native
