"""One auth-off `openruns server` per test module (each test makes its own runs)."""

from __future__ import annotations

import pytest

from openruns.api import Client
from tests.server.helpers import ServerProcess


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc = ServerProcess(tmp_path_factory.mktemp("wandb-server") / "data").start()
    yield proc
    proc.stop()


@pytest.fixture
def client(server):
    with Client(base_url=server.url) as native:
        yield native
