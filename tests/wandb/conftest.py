"""One auth-off `openruns server` for the W&B tests of a worker (each test makes its own runs:
a server per module would start seven on a 2-core machine)."""

from __future__ import annotations

import pytest

from tests.prime.conftest import client  # noqa: F401 (a fixture: a Client of `server`)
from tests.server.helpers import server_process


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    with server_process(tmp_path_factory, "wandb-server") as proc:
        yield proc
