"""A run of 20,000 metric keys in the browser (issue 21): the run page charts the most recently
logged keys and finds the others by search; the runs page's column chooser stays small."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import orjson
import pytest
from playwright.sync_api import expect

from openruns.server import ServerHandle, serve_in_thread

from .. import patience
from ..browser import own_page
from .chart_view import lines, plot
from .seed import finished_run

KEYS = 20_000


@pytest.fixture(scope="module")
def many(tmp_path_factory) -> Iterator[tuple[ServerHandle, str]]:
    """A server of its own with one finished run of 20,000 keys logged at steps 0-1 (the
    `hot/*` ones at steps 0-2: the most recent)."""
    handle = serve_in_thread(tmp_path_factory.mktemp("many-keys") / "data")
    # One upload of 40,000 points across 20,000 keys: over 60 s at load 17 (its block summaries).
    values = {f"layer{i // 100:03d}/unit{i % 100:02d}": float(i) for i in range(KEYS - 10)}
    hot = {f"hot/m{i}": float(i) for i in range(10)}
    rows = [
        {"step": 0, "values": {**values, **hot}},
        {"step": 1, "values": {**values, **hot}},
        {"step": 2, "values": hot},
    ]
    body = b"".join(orjson.dumps(row) + b"\n" for row in rows)
    with httpx.Client(base_url=handle.url + "/api/v1", timeout=patience.SETTLE) as http:
        run_id = finished_run(http, "many-keys", {"metrics": body})
    yield handle, run_id
    handle.stop()


@pytest.fixture
def page(browser, many) -> Iterator:
    with own_page(browser, many[0].url) as page:
        yield page


def test_the_run_page_charts_recent_keys_and_finds_the_others(page, many):
    _, run_id = many
    page.goto(f"/runs/{run_id}")
    expect(page.locator("#keys-note")).to_contain_text("20,000 metric keys: 40 charted")
    charts = page.locator("figure.chart")
    expect(charts).to_have_count(40)
    # The most recently logged first: every hot/* key is charted, and drawn (uPlot's canvas,
    # holding the key's three values).
    for i in range(10):
        expect(page.locator(f'figure.chart[data-key="hot/m{i}"]')).to_have_attribute(
            "data-drawn", "true"
        )
    assert lines(page, "hot/m7", "value")[0]["y"] == [7.0, 7.0, 7.0]
    assert page.locator(f"{plot('hot/m7')} canvas").count() == 1
    expect(page.locator("#key-search")).to_be_visible()
    # A key far from the recent ones, found by search and charted on demand.
    page.fill("#key-search", "LAYER150/unit4")
    matches = page.locator("#key-matches button")
    expect(matches).to_have_count(10)  # unit40..unit49
    page.click('#key-matches button[data-key="layer150/unit42"]')
    chart = page.locator('figure.chart[data-key="layer150/unit42"]')
    expect(chart).to_have_attribute("data-drawn", "true")
    expect(charts).to_have_count(41)
    expect(page.locator("#keys-note")).to_contain_text("41 charted")
    # More of the recent order, 40 at a time.
    page.click("#keys-more")
    expect(charts).to_have_count(81)


def test_the_runs_page_chooser_offers_a_search_not_every_key(page, many):
    page.goto("/")
    expect(page.locator("#runs tbody tr[data-run-id]")).to_have_count(1)
    page.click("#columns summary")
    offered = page.locator("#columns-metrics input")
    expect(offered).to_have_count(60)  # the chosen columns and the first matches, no more
    expect(page.locator("#columns-metrics")).to_contain_text("more: type part of a name")
    page.fill("#columns-q", "hot/m")
    expect(offered).to_have_count(10)
    page.check('#columns-metrics input[value="hot/m7"]')
    expect(page.locator("#runs-head th").last).to_have_text("hot/m7")
    # A key beyond those read of each run: typed, then Enter; its latest value is read.
    page.fill("#columns-q", "layer199/unit89")
    page.press("#columns-q", "Enter")
    expect(page.locator("#runs-head th").last).to_have_text("layer199/unit89")
    expect(page.locator("#runs tbody tr[data-run-id] td").last).to_have_text("19,989")
