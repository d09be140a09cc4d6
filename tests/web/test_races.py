"""
A stale answer never draws over a newer view (issue 24). Each test holds the page's first read
of a view at the network (Playwright's `page.route`), changes what the view shows, waits for
the newer answer to be drawn, then lets the held answer go: the page must have given it up
(its request cancelled when the newer read began) and still show the newer view. The order is
forced, not hoped for.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import expect

from .seed import CONSOLE_LINES, EPISODES_PER_STEP, EVAL_EPISODES, EVAL_STEP

WAIT_S = 30  # the bound of every wait here (a loaded machine is slow, never this slow)


class Held:
    """The first request whose URL `first` accepts is held at the network until `release`;
    every other request goes on as usual."""

    def __init__(self, page, pattern: str, first: Callable[[str], bool]):
        self.page = page
        self.first = first
        self.route: Any = None
        self.outcome: str | None = None  # "failed" (cancelled by the page) or "finished"
        page.route(pattern, self._route)
        page.on("requestfailed", lambda r: self._ended(r, "failed"))
        page.on("requestfinished", lambda r: self._ended(r, "finished"))

    def _route(self, route) -> None:
        if self.route is None and self.first(route.request.url):
            self.route = route
        else:
            route.continue_()

    def _ended(self, request, outcome: str) -> None:
        if self.route is not None and request is self.route.request and self.outcome is None:
            self.outcome = outcome

    def _until(self, done: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while not done():
            assert time.monotonic() < deadline, f"never {what}"
            self.page.wait_for_timeout(20)  # Playwright delivers the page's events meanwhile

    def wait_held(self) -> str:
        """Wait until the page has made the request; its URL."""
        self._until(lambda: self.route is not None, "requested")
        return self.route.request.url

    def release(self) -> str:
        """Let the held request go, wait until it has ended, and say how: "failed" when the
        page had cancelled it, "finished" when its answer reached the page."""
        try:
            self.route.continue_()
        except PlaywrightError:
            pass  # cancelled by the page before it was let go
        self._until(lambda: self.outcome is not None, "ended")
        return self.outcome or ""


def test_a_slow_histogram_for_all_kinds_never_draws_over_the_eval_one(page, seeded):
    held = Held(page, "**/api/v1/runs/*/rewards?*", lambda url: "kind=" not in url)
    page.goto(f"/runs/{seeded.train}/steps/{EVAL_STEP}")
    rows = page.locator("#episodes tbody tr")
    expect(rows).to_have_count(EPISODES_PER_STEP + EVAL_EPISODES)
    held.wait_held()  # the histogram of every kind, asked for after the table
    page.select_option("#f-kind", "eval")
    histogram = page.locator("#histogram")
    expect(histogram).to_have_attribute("data-count", str(EVAL_EPISODES))
    expect(rows).to_have_count(EVAL_EPISODES)
    assert held.release() == "failed"  # given up when the eval read began
    expect(histogram).to_have_attribute("data-count", str(EVAL_EPISODES))
    expect(page.locator("#histogram-caption")).to_contain_text(f"{EVAL_EPISODES} rewards")
    expect(page.locator("#step-stats")).to_contain_text(f"{EVAL_EPISODES} eval episodes dispatched")


def test_a_slow_page_of_rows_never_replaces_the_filtered_one(page, seeded):
    # The step's rows and totals: the first read after a filter change is held.
    held = Held(page, "**/api/v1/runs/*/episodes?*", lambda url: "ok=false" not in url)
    page.goto(f"/runs/{seeded.train}/steps/1")
    held.wait_held()
    page.select_option("#f-ok", "false")
    rows = page.locator("#episodes tbody tr")
    expect(rows).to_have_count(1)  # the one episode of step 1 that failed
    assert held.release() == "failed"
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-id", seeded.long_episode)


def test_a_slow_log_page_of_every_stream_never_replaces_the_stderr_one(page, seeded):
    held = Held(page, "**/api/v1/runs/*/logs?*", lambda url: "stream=" not in url)
    page.goto(f"/runs/{seeded.train}#logs")
    held.wait_held()  # the newest lines of every stream
    page.select_option("#log-stream", "stderr")
    lines = page.locator("#log-lines .log-line")
    expect(lines).to_have_count(1)
    assert held.release() == "failed"
    expect(lines).to_have_count(1)
    expect(lines.first).to_have_attribute("data-stream", "stderr")
    page.select_option("#log-stream", "")
    expect(lines).to_have_count(CONSOLE_LINES + 1)


def test_a_slow_runs_page_never_replaces_the_filtered_one(page, seeded):
    held = Held(page, "**/api/v1/runs?*", lambda url: "name=" not in url)
    page.goto("/")
    held.wait_held()  # the first page of every run
    page.fill("#f-name", "web-failed")
    rows = page.locator("#runs tbody tr[data-run-id]")
    expect(rows).to_have_count(1)
    assert held.release() == "failed"
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-run-id", seeded.failed)
