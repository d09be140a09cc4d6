"""
Fixtures of the browser tests: one real server (127.0.0.1, a free port, a temporary data
directory) with runs seeded through the SDK, and Debian's Chromium driven by Playwright's
Python package (`executable_path`, never `playwright install`). Every page a test opens fails
the test if it logs a JavaScript error or a failed request.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from openruns.server import ServerHandle, serve_in_thread

from ..browser import PAGE_MS, VIEWPORT, own_page, watch
from .seed import Seeded, seed

# Where screenshot() saves: a temporary directory, unless OPENRUNS_SCREENSHOTS names one
# (`make screenshots` sets it to docs/screenshots to refresh the README's pictures).
SCREENSHOTS_ENV = "OPENRUNS_SCREENSHOTS"


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> Iterator[ServerHandle]:
    handle = serve_in_thread(tmp_path_factory.mktemp("web-data"))
    yield handle
    handle.stop()


@pytest.fixture(scope="session")
def seeded(server, tmp_path_factory) -> Seeded:
    with pytest.MonkeyPatch.context() as patch:
        for name in list(os.environ):
            if name.startswith("OPENRUNS_") or name in ("RUN_ID", "RANK", "LOCAL_RANK"):
                patch.delenv(name)
        local = tmp_path_factory.mktemp("web-local")
        patch.setenv("OPENRUNS_CONFIG_FILE", str(local / "no-config.toml"))
        return seed(server.url, local)


@pytest.fixture(scope="session")
def context(browser, server) -> Iterator:
    """One browser context for the session, so its HTTP cache keeps Plotly's bundle (served
    with a year's max-age) across tests, as a person's browser would."""
    context = browser.new_context(viewport=VIEWPORT, base_url=server.url)
    context.set_default_timeout(PAGE_MS)
    yield context
    context.close()


@pytest.fixture
def page(context) -> Iterator:
    """A fresh page at 1280 px; JavaScript errors and failed requests fail the test."""
    page = context.new_page()
    problems = watch(page)
    yield page
    page.close()
    assert not problems, "\n".join(problems)


@pytest.fixture
def fresh_page(browser, server) -> Iterator:
    """A page in a context of its own (its own local storage), for tests that change the
    preferences a browser keeps; errors fail the test as with `page`."""
    with own_page(browser, server.url) as page:
        yield page


@pytest.fixture(scope="session")
def screenshot_dir(tmp_path_factory) -> Path:
    named = os.environ.get(SCREENSHOTS_ENV)
    return Path(named) if named else tmp_path_factory.mktemp("screenshots")


@pytest.fixture
def screenshot(screenshot_dir):
    """screenshot(page, "run") saves run.png in a temporary directory, or in
    $OPENRUNS_SCREENSHOTS (`make screenshots`: docs/screenshots, which the README shows)."""

    def save(page, name: str, full_page: bool = False) -> None:
        screenshot_dir.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(screenshot_dir / f"{name}.png"), full_page=full_page)

    return save
