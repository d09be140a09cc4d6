"""The request models' status Literals spell out spec.RunStatus, the one vocabulary."""

from __future__ import annotations

from typing import get_args

from openruns.server.models import Status, Terminal
from openruns.spec import RunStatus


def test_status_literals_are_the_run_statuses() -> None:
    assert list(get_args(Status)) == [s.value for s in RunStatus]
    assert list(get_args(Terminal)) == [s.value for s in RunStatus if s.is_terminal()]
