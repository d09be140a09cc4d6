"""Charts in a real browser: drawn without scrolling (those in view first), smoothing with the
raw series behind, log scale, time axes, hover values, reward bands, and one colour per run on
every chart."""

from __future__ import annotations

import statistics
from urllib.parse import parse_qs, urlparse

import numpy
from playwright.sync_api import expect

from .chart_view import axes, hover, lines, plot
from .seed import EPISODE_STEPS, TRAIN_STEPS


def test_every_chart_is_drawn_without_scrolling_to_it(page, seeded, screenshot):
    page.set_viewport_size({"width": 1280, "height": 500})  # most charts are below the fold
    page.goto(f"/runs/{seeded.train}")
    # The system section is collapsed (until a reader opens it): its charts are read then.
    charts = page.locator(".chart-section:not([data-section=system]) figure.chart")
    expect(charts).to_have_count(6)
    for i in range(6):
        expect(charts.nth(i)).to_have_attribute("data-drawn", "true")
    assert page.evaluate("window.scrollY") == 0
    below = charts.evaluate_all(
        "(els) => els.filter((e) => e.getBoundingClientRect().top > innerHeight).length"
    )
    assert below >= 2  # the test means something: charts out of view were drawn too
    page.set_viewport_size({"width": 1280, "height": 900})
    screenshot(page, "run", full_page=True)


# The keys of the grid's charts in the order they are drawn.
DRAW_ORDER = """
window.__drawn = [];
new MutationObserver((records) => {
  for (const r of records) {
    const el = r.target;
    if (el.matches("figure.chart:not(.bands)") && el.dataset.drawn === "true"
        && !window.__drawn.includes(el.dataset.key)) window.__drawn.push(el.dataset.key);
  }
}).observe(document, {subtree: true, attributes: true, attributeFilter: ["data-drawn"]});
"""

IN_VIEW = """(els) => els.filter((e) => {
  const r = e.getBoundingClientRect();
  return r.bottom > 0 && r.top < innerHeight;
}).map((e) => e.dataset.key)"""


def test_charts_in_view_when_their_data_arrives_are_drawn_first(page, seeded):
    page.set_viewport_size({"width": 1280, "height": 500})
    page.add_init_script(DRAW_ORDER)
    # The grid's reads of series are held until the reader has scrolled down the page.
    held: list = []
    released = False

    def hold(route) -> None:
        if released:
            route.continue_()
        else:
            held.append(route)

    page.route(lambda url: "/metrics?" in url, hold)
    with page.expect_request(lambda r: "/metrics?" in r.url):
        page.goto(f"/runs/{seeded.train}")
    charts = page.locator(".chart-section:not([data-section=system]) figure.chart:not(.bands)")
    keys = charts.evaluate_all("(els) => els.map((e) => e.dataset.key)")
    # The train group's second row at the top of the view: its first row is out of view,
    # and one read holds the charts of both rows (one width, one read).
    page.locator('figure.chart[data-key="train/reward"]').evaluate(
        "(el) => el.scrollIntoView({block: 'start'})"
    )
    in_view = set(charts.evaluate_all(IN_VIEW))
    assert in_view and keys[0] not in in_view  # the first charts in page order are out of view
    # Two frames: the page's IntersectionObservers have seen the scroll (computed in one
    # frame's rendering, their callbacks run before the next).
    page.evaluate("() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))")
    reads = [set(parse_qs(urlparse(r.request.url).query)["keys"][0].split(",")) for r in held]
    released = True
    for route in held:
        route.continue_()
    for i in range(len(keys)):
        expect(charts.nth(i)).to_have_attribute("data-drawn", "true")
    drawn = page.evaluate("window.__drawn")
    assert sorted(drawn) == sorted(keys)
    # A read's charts are drawn as its data arrives (reads arrive in any order, and one read's
    # charts may be drawn before another's in view): of each read, those in view first,
    # whatever their place in the page.
    mixed = [read for read in reads if read & in_view and read - in_view]
    assert mixed, (reads, in_view)  # the test means something: a read held both kinds
    for read in mixed:
        order = [key for key in drawn if key in read]
        assert set(order[: len(read & in_view)]) == read & in_view, (order, in_view)


def test_smoothing_log_scale_and_time_axes_are_kept_in_the_browser(fresh_page, seeded):
    page = fresh_page
    page.goto(f"/runs/{seeded.train}")
    key = "train/loss"
    expect(page.locator(f'figure.chart[data-key="{key}"]')).to_have_attribute("data-drawn", "true")
    assert [t["meta"] for t in lines(page, key)] == ["value"]

    page.eval_on_selector(
        "#smoothing", "(el) => { el.value = '0.9'; el.dispatchEvent(new Event('input')); }"
    )
    expect(page.locator("#smoothing-value")).to_have_text("0.90")
    page.wait_for_function(
        "(sel) => document.querySelector(sel).seriesChart.drawn()"
        ".some((t) => t.meta === 'smoothed')",
        arg=plot(key),
    )
    drawn = {t["meta"]: t for t in lines(page, key)}
    raw, smooth = drawn["value"], drawn["smoothed"]
    assert raw["opacity"] < 1 and smooth["color"] == raw["color"]
    # A debiased EMA of the raw values.
    expected, last = [], 0.0
    for n, v in enumerate(raw["y"], start=1):
        last = 0.9 * last + 0.1 * v
        expected.append(last / (1 - 0.9**n))
    assert numpy.allclose(smooth["y"], expected)

    page.check("#log-y")
    page.wait_for_function(
        "(sel) => document.querySelector(sel).seriesChart.axes().y.type === 'log'", arg=plot(key)
    )
    page.select_option("#x-axis", "wall")
    page.wait_for_function(
        "(sel) => document.querySelector(sel).seriesChart.axes().x.type === 'date'",
        arg=plot(key),
    )
    assert axes(page, key)["x"]["title"] == "wall time"
    page.select_option("#x-axis", "relative")
    page.wait_for_function(
        "(sel) => document.querySelector(sel).seriesChart.axes().x.title.endsWith('since start')",
        arg=plot(key),
    )
    xs = next(t for t in lines(page, key) if t["meta"] == "value")["x"]
    assert xs[0] == 0 and all(b >= a for a, b in zip(xs, xs[1:], strict=False))

    # Kept in this browser: the next page load draws the same way.
    page.reload()
    expect(page.locator(f'figure.chart[data-key="{key}"]')).to_have_attribute("data-drawn", "true")
    assert page.input_value("#smoothing") == "0.9"
    assert page.is_checked("#log-y")
    assert page.input_value("#x-axis") == "relative"
    assert axes(page, key)["y"]["type"] == "log"
    assert {t["meta"] for t in lines(page, key)} == {"value", "smoothed"}


def test_hover_shows_values_with_their_step(page, seeded):
    page.goto(f"/runs/{seeded.train}")
    key = "train/loss"
    expect(page.locator(f'figure.chart[data-key="{key}"]')).to_have_attribute("data-drawn", "true")
    hover(page, key, 100)
    label = page.locator(f'figure.chart[data-key="{key}"] .u-legend')
    expect(label).to_contain_text("(step 100)")
    expect(label).to_contain_text("0.7358")  # 2 * exp(-1)


def test_reward_bands_are_the_quantiles_of_each_step(page, seeded):
    page.goto(f"/runs/{seeded.train}")
    bands = page.locator("figure.chart.bands")
    expect(bands).to_have_attribute("data-drawn", "true")
    drawn = {t["meta"]: t for t in lines(page, "episodes/reward quantiles")}
    assert drawn["p50"]["x"] == list(range(EPISODE_STEPS))
    for step in range(EPISODE_STEPS):
        rewards = seeded.rewards[step]
        assert numpy.isclose(drawn["p50"]["y"][step], statistics.median(rewards))
        assert numpy.isclose(drawn["p10"]["y"][step], numpy.quantile(rewards, 0.1))
        assert numpy.isclose(drawn["p90"]["y"][step], numpy.quantile(rewards, 0.9))


def test_a_run_keeps_its_colour_on_every_chart_and_page(page, seeded):
    page.goto(f"/compare?runs={seeded.train},{seeded.eval}")
    loss = page.locator('figure.chart[data-key="train/loss"]')
    expect(loss).to_have_attribute("data-points", f"{TRAIN_STEPS},{TRAIN_STEPS}")
    expect(page.locator('figure.chart[data-key="eval/reward"]')).to_have_attribute(
        "data-drawn", "true"
    )
    colours = {}
    for key in ("train/loss", "eval/reward", "train/grad_norm"):
        for t in lines(page, key):
            if t["meta"] == "value":
                colours.setdefault(t["name"], set()).add(t["color"])
    train_name = f"web-train · {seeded.train[-6:]}"
    eval_name = f"web-eval · {seeded.eval[-6:]}"
    assert len(colours[train_name]) == 1 and len(colours[eval_name]) == 1
    assert colours[train_name] != colours[eval_name]
    # The run's own page uses the same colour.
    page.goto(f"/runs/{seeded.train}")
    expect(page.locator('figure.chart[data-key="train/loss"]')).to_have_attribute(
        "data-drawn", "true"
    )
    own = next(t for t in lines(page, "train/loss") if t["meta"] == "value")
    assert {own["color"]} == colours[train_name]
