"""One auth-off `openruns server` for the W&B tests of a worker (each test makes its own runs:
a server per module would start seven on a 2-core machine), and their time limit."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.prime.conftest import client  # noqa: F401 (a fixture: a Client of `server`)
from tests.server.helpers import server_process

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
    with server_process(tmp_path_factory, "wandb-server") as proc:
        yield proc
