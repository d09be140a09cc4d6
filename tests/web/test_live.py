"""Live pages: what a running run logs appears without a reload, read with a cursor."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

import openruns
from openruns.demo import make_episode
from openruns.server import ServerHandle, serve_in_thread

from ..browser import PAGE_MS
from .chart_view import lines

LIVE_MS = PAGE_MS  # a poll (2-3 s) plus the SDK's upload, on a loaded machine


@pytest.fixture
def live_server(tmp_path) -> Iterator[ServerHandle]:
    """A server of its own, so the session's seeded runs stay as the other tests expect."""
    handle = serve_in_thread(tmp_path / "data")
    yield handle
    handle.stop()


def episodes(step: int, count: int, seed: int = 0) -> list[dict]:
    """Episodes dispatched at `step` (their run.work.step, which is the step they index at)."""
    rng = random.Random(seed)
    return [make_episode(rng, step, 0.5, "train") for _ in range(count)]


def test_run_page_appends_points_and_steps_without_reload(page, live_server, tmp_path):
    run = openruns.init(
        kind="train", name="web-live", base_url=live_server.url, dir=tmp_path / "local"
    )
    try:
        for step in range(10):
            run.log_metrics({"live/value": float(step)}, step=step)
        run.log_episodes(episodes(0, 3), step=0)
        assert run.flush()

        page.goto(f"{live_server.url}/runs/{run.id}")
        chart = page.locator('figure.chart[data-key="live/value"]')
        expect(chart).to_have_attribute("data-points", "10")
        steps = page.locator("#steps-table tbody tr")
        expect(steps).to_have_count(1)
        expect(page.locator("#run-header .badge").first).to_have_text("running")
        page.evaluate("window.sameDocument = true")
        reads: list[str] = []
        page.on("request", lambda r: reads.append(r.url) if "/metrics?" in r.url else None)

        run.log_metrics({"live/value": 10.0}, step=10)
        run.log_episodes(episodes(1, 2), step=1)
        assert run.flush()
        expect(chart).to_have_attribute("data-points", "11", timeout=LIVE_MS)
        expect(steps).to_have_count(2, timeout=LIVE_MS)
        expect(steps.nth(0)).to_contain_text("step 1")
        y = lines(page, "live/value", "value")[0]["y"]
        assert y == [float(s) for s in range(11)]
        assert page.evaluate("window.sameDocument") is True  # no reload
        # Only the new points were asked for.
        assert reads and all("step_min=10" in url for url in reads)
    finally:
        run.finish()
    expect(page.locator("#run-header .badge").first).to_have_text("completed", timeout=LIVE_MS)


def test_step_page_shows_new_episodes_of_its_step(page, live_server, tmp_path):
    run = openruns.init(
        kind="train", name="web-live", base_url=live_server.url, dir=tmp_path / "local"
    )
    try:
        run.log_episodes(episodes(0, 2), step=0)
        assert run.flush()
        page.goto(f"{live_server.url}/runs/{run.id}/steps/0")
        rows = page.locator("#episodes tbody tr")
        expect(rows).to_have_count(2)
        page.evaluate("window.sameDocument = true")
        run.log_episodes(episodes(0, 3, seed=1), step=0)
        assert run.flush()
        expect(rows).to_have_count(5, timeout=LIVE_MS)
        expect(page.locator("#step-stats")).to_contain_text("5 episodes")
        assert page.evaluate("window.sameDocument") is True
        # Still sorted by reward, highest first.
        rewards = [float(r) for r in rows.evaluate_all("(rs) => rs.map((r) => r.dataset.reward)")]
        assert rewards == sorted(rewards, reverse=True)
    finally:
        run.finish()


def test_rows_without_a_step_and_console_lines_follow_a_live_run(page, live_server, tmp_path):
    import time

    import httpx
    import orjson

    run = openruns.init(
        kind="train", name="web-live-time", base_url=live_server.url, dir=tmp_path / "local"
    )

    def lines(texts: list[str]) -> None:
        body = b"".join(
            orjson.dumps({"ts": time.time(), "stream": "stdout", "line": t}) + b"\n" for t in texts
        )
        url = f"{live_server.url}/api/v1/runs/{run.id}/logs"
        httpx.post(url, content=body, timeout=30).raise_for_status()

    try:
        for i in range(5):
            run.log_metrics({"inference/queue_depth": float(i)})
            time.sleep(0.01)
        assert run.flush()
        lines(["first line", "second line"])
        page.goto(f"{live_server.url}/runs/{run.id}#logs")
        log = page.locator("#log-lines .log-line")
        expect(log).to_have_count(2)
        page.click("#tab-overview")
        chart = page.locator('figure.chart[data-axis="time"][data-key="inference/queue_depth"]')
        expect(chart).to_have_attribute("data-points", "5")
        reads: list[str] = []
        page.on("request", lambda r: reads.append(r.url) if "/metrics?" in r.url else None)

        run.log_metrics({"inference/queue_depth": 5.0})
        assert run.flush()
        expect(chart).to_have_attribute("data-points", "6", timeout=LIVE_MS)
        # Only rows from the last time drawn were asked for.
        assert reads and all("ts_min=" in url for url in reads)

        page.click("#tab-logs")
        lines(["third line"])
        expect(log).to_have_count(3, timeout=LIVE_MS)
        expect(log.nth(2)).to_contain_text("third line")
    finally:
        run.finish()
