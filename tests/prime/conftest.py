"""A real `openruns server` process on loopback for the Prime drop-in tests (one per module)."""

from __future__ import annotations

import pytest

from openruns.api import Client
from tests.server.helpers import server_process


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with server_process(tmp_path_factory, "prime") as proc:
        yield proc


@pytest.fixture
def client(server):
    with Client(base_url=server.url) as native:
        yield native
