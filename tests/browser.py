"""
The one browser of a test worker: Debian's Chromium driven by Playwright's Python package
(`executable_path`, never `playwright install`), a session fixture registered for every test
directory (tests/conftest.py). Playwright's sync API allows one instance per thread, so the
dashboard tests of tests/web and those of a wire (tests/wandb) share this one.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect, sync_playwright

from .patience import PAGE

PAGE_MS = PAGE * 1000

# What a page shows waits on its fetches and drawing, which took over 15 s on a 2-core machine
# at load 17: assertions wait as long as actions do (playwright's default is 5 s).
expect.set_options(timeout=PAGE_MS)

CHROMIUM = os.environ.get("OPENRUNS_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # Headless Chromium builds the omnibox's popup (a WebUI page of its own, in Lit) for every
    # page it opens: ~0.7 s of CPU a page, more than most dashboard pages cost to load.
    "--disable-features=WebUIOmniboxPopup,WebUIOmniboxFullPopup,WebUIOmniboxAimPopup",
]
VIEWPORT = {"width": 1280, "height": 900}


@pytest.fixture(scope="session")
def browser() -> Iterator:
    if not shutil.which(CHROMIUM):
        message = f"no Chromium at {CHROMIUM} (scripts/test installs Debian's chromium)"
        if os.environ.get("CI"):
            pytest.fail(message)  # CI must run these, not skip them
        pytest.skip(message)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def watch(page) -> list[str]:
    """The JavaScript errors and failed requests of `page`, as they happen."""
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("console", lambda message: _console(message, problems))
    page.on("requestfailed", lambda request: _request_failed(request, problems))
    return problems


def _console(message, problems: list[str]) -> None:
    if message.type == "error":
        problems.append(f"console error: {message.text}")


def _request_failed(request, problems: list[str]) -> None:
    # A navigation away cancels the polls in flight; that is not a failure of the page.
    if request.failure and "ERR_ABORTED" not in request.failure:
        problems.append(f"request failed: {request.url} {request.failure}")


@contextlib.contextmanager
def own_page(browser, base_url: str, timeout: float = PAGE_MS) -> Iterator:
    """A page in a browser context of its own at `base_url`; its errors fail the test."""
    context = browser.new_context(viewport=VIEWPORT, base_url=base_url)
    context.set_default_timeout(timeout)
    page = context.new_page()
    problems = watch(page)
    yield page
    context.close()
    assert not problems, "\n".join(problems)
