"""The read client's tests run against a server on each store configuration (tests/services)."""

from __future__ import annotations

import pytest

from ..services import BACKENDS


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request) -> str:
    return request.param
