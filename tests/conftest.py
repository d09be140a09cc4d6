from __future__ import annotations

import asyncio
import os

import pytest

from . import procs

# Session services (PostgreSQL, an S3 endpoint) for the tests of the scale-out stores.
pytest_plugins = ["tests.services", "tests.browser"]

_RUN_ENV = (
    "OPENRUNS_RUN_ID",
    "OPENRUNS_RUN_PID",
    "OPENRUNS_RUN_KIND",
    "OPENRUNS_RUN_DIR",
    "RUN_ID",
)


def pytest_configure(config: pytest.Config) -> None:
    """Every test speaks plain HTTP on loopback, yet each httpx client (one a call of
    `httpx.get`) builds a verifying TLS context: ~25 ms of CPU loading the machine's bundle.
    An empty trust store (SSL_CERT_DIR naming no directory of certificates, looked up on
    demand) makes that free; a test that reached for TLS would fail verification, not pass
    by it. Set before xdist's workers start, so they and the tests' subprocesses inherit it."""
    os.environ.pop("SSL_CERT_FILE", None)
    os.environ["SSL_CERT_DIR"] = os.devnull


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked slow (ten seconds or more, mostly waiting) start first on every worker, so
    the others' tests fill the cores around them instead of one slow test ending the run alone.

    xdist's worksteal hands the collection out in contiguous slices (worker k of n, of `left`
    tests not yet handed out: the next left // (n - k)) and steals from the ends of the
    queues: sorting every slow test to the front gave them all to one worker, which then
    waited through them one after another (one run: a 20 s test started at 239 s of 264).
    So each slice begins with its share of the slow tests, a module's together (its module
    fixtures, a server among them, set up once), the biggest modules dealt first."""
    rest = [item for item in items if not item.get_closest_marker("slow")]
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    by_module: dict[str, list[pytest.Item]] = {}
    for item in items:
        if item.get_closest_marker("slow"):
            by_module.setdefault(item.nodeid.split("::")[0], []).append(item)
    shares: list[list[pytest.Item]] = [[] for _ in range(workers)]
    for module in sorted(by_module.values(), key=len, reverse=True):
        min(shares, key=len).extend(module)
    order: list[pytest.Item] = []
    left = len(items)
    for k, share in enumerate(shares):
        size = left // (workers - k)
        left -= size
        order += share + rest[: max(0, size - len(share))]
        del rest[: max(0, size - len(share))]
    items[:] = order + rest  # (rest is empty unless a slice held more slow tests than its size)


@pytest.fixture(autouse=True)
def _no_foreign_running_loop(request):
    """The browser tests' session Playwright (sync API) leaves its event loop marked as running
    in the worker's main thread between its calls; a test of another directory that runs a
    loop of its own (`asyncio.run`, as trainers do) runs with the mark lifted, then put back.
    A browser test elsewhere (one using the `browser` fixture, tests/wandb) keeps it."""
    marked = asyncio._get_running_loop()
    parts = request.node.path.relative_to(request.config.rootpath).parts
    if marked is None or "web" in parts or "browser" in request.fixturenames:
        yield
        return
    asyncio._set_running_loop(None)
    try:
        yield
    finally:
        asyncio._set_running_loop(marked)


# Set by launchers and schedulers; a test sets the ones it needs in its subprocesses.
_INHERITED = ("RUN_ID", "RANK", "LOCAL_RANK", "DP_RANK", "SLURM_JOB_ID")


@pytest.fixture(autouse=True)
def _isolated_settings(tmp_path, monkeypatch):
    """No user config, no inherited run, no OPENRUNS_* (or PRIME_*, read after them) settings
    from the developer's shell."""
    for name in list(os.environ):
        if name.startswith(("OPENRUNS_", "PRIME_")) or name in _INHERITED:
            monkeypatch.delenv(name)
    monkeypatch.setenv("OPENRUNS_CONFIG_FILE", str(tmp_path / "no-config.toml"))
    monkeypatch.setenv("OPENRUNS_SERVER_CONFIG", str(tmp_path / "no-server-config.toml"))
    # System metrics and console capture add rows on their own clock: off unless a test turns
    # them on (tests/sdk/test_system.py, test_console.py).
    monkeypatch.setenv("OPENRUNS_SYSTEM_METRICS_INTERVAL", "0")
    monkeypatch.setenv("OPENRUNS_CAPTURE_CONSOLE", "0")
    yield
    procs.reap()
    # init() exports the run it creates straight into os.environ; undo what a test left behind.
    for name in _RUN_ENV:
        os.environ.pop(name, None)
