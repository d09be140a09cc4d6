"""One auth-off `openruns server` for the W&B tests of a worker (each test makes its own runs:
a server per module would start seven on a 2-core machine), and their time limit."""

from __future__ import annotations

from pathlib import Path

import pytest

from openruns.api import Client
from tests.server.helpers import ServerProcess

HERE = Path(__file__).parent
# Each scenario starts a wandb process (seconds of CPU before its first request) against a
# real server; on a loaded machine (load 6+ in CI) that takes longer than the default limit.
SCENARIO_TIMEOUT = 300


def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.is_relative_to(HERE) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SCENARIO_TIMEOUT))


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    proc = ServerProcess(tmp_path_factory.mktemp("wandb-server") / "data").start()
    yield proc
    proc.stop()


@pytest.fixture
def client(server):
    with Client(base_url=server.url) as native:
        yield native
