"""
How long the tests wait for what takes seconds on a quiet machine, written once (issue 24).

A wait is a bound, never a measurement: it ends a test that hangs. The suite must also pass on
a 2-core machine at load 20 (other suites beside it, `shared/tools/suite-under-load`), where
an interpreter's imports alone took over a minute, `openruns server` printed nothing for 60 s
and moto did not answer in 30 s; a bound set for a quiet machine failed there. So each bound
is minutes, and `timeout` in pyproject.toml (pytest-timeout, per test) is above their sums.
"""

from __future__ import annotations

START = 300.0  # a subprocess (a server, moto, PostgreSQL, an SDK script) to come up
EXIT = 300.0  # a subprocess to do its work and exit, or to exit after a signal
SETTLE = 120.0  # the system under test to reach a state it reaches by itself (a thread done)
PAGE = 60.0  # a dashboard page to show what it shows (its fetches, a chart engine's start, drawing)
REQUEST = 60.0  # one request to a server on loopback to be answered (httpx's default is 5 s)
