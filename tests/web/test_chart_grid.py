"""The chart grid on uPlot (issue 21): a canvas chart per key holding the values the API
returned, compare's legend naming every run in its colour, and a grid of many charts that
draws those in view and more as the reader scrolls."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import orjson
import pytest
from playwright.sync_api import expect

from openruns.server import ServerHandle, serve_in_thread

from .. import patience
from ..browser import own_page
from .chart_view import hover, lines, plot

MANY = 120  # metric keys of the wide run: more than the grid draws without scrolling (60)


def test_every_key_is_a_uplot_chart_of_the_values_the_api_returned(page, seeded):
    page.goto(f"/runs/{seeded.train}")
    charts = page.locator('[data-section="train"] figure.chart:not(.bands)')
    expect(charts.first).to_have_attribute("data-drawn", "true")
    keys = charts.evaluate_all("(els) => els.map((e) => e.dataset.key)")
    assert "train/loss" in keys and len(keys) >= 3
    for key in keys:
        chart = page.locator(f'figure.chart[data-key="{key}"]')
        expect(chart).to_have_attribute("data-drawn", "true")
        assert page.locator(f"{plot(key)} canvas").count() == 1  # uPlot's canvas, no SVG
        # The chart holds what the API answers at its width (bucketed when the run has more
        # steps than the chart has pixels: last, min and max of each bucket).
        width = page.eval_on_selector(plot(key), "(el) => el.seriesChart.width()")
        answer = page.request.get(
            f"/api/v1/runs/{seeded.train}/metrics", params={"keys": key, "max_points": width}
        ).json()
        series = answer["series"][key]
        drawn = lines(page, key, "value")[0]
        assert drawn["x"] == series["step"] and drawn["y"] == series["value"], key
        if answer["downsampled"]:
            assert lines(page, key, "max")[0]["y"] == series["max"]
            assert lines(page, key, "min")[0]["y"] == series["min"]
    assert chart_of(page, "train/grad_norm").get_attribute("data-downsampled") == "true"


def chart_of(page, key: str):
    return page.locator(f'figure.chart[data-key="{key}"]')


def test_compare_names_every_run_in_its_colour_in_the_legend(page, seeded):
    runs = [seeded.train, seeded.eval, seeded.failed]
    page.goto(f"/compare?runs={','.join(runs)}")
    expect(page.locator("#chosen li")).to_have_count(3)
    key = "train/loss"
    expect(page.locator(f'figure.chart[data-key="{key}"]')).to_have_attribute(
        "data-points", "300,300,1"
    )
    drawn = lines(page, key, "value")
    names = [line["name"] for line in drawn]
    assert names == [
        f"web-train · {seeded.train[-6:]}",
        f"web-eval · {seeded.eval[-6:]}",
        f"web-failed · {seeded.failed[-6:]}",
    ]
    assert len({line["color"] for line in drawn}) == 3
    assert drawn[2]["y"] == [3.0]  # the failed run's one point is there too
    # The legend shows each run's name (the band edges and raw lines are not listed), its
    # marker in the run's colour, and on hover its value at that step.
    legend = page.locator(f'figure.chart[data-key="{key}"] .u-legend tr.u-series:visible')
    expect(legend).to_have_count(4)  # the x axis, then the three runs
    assert legend.locator(".u-label").all_inner_texts()[1:] == names
    colours = legend.locator(".u-marker").evaluate_all(
        "(els) => els.slice(1).map((e) => getComputedStyle(e).borderColor)"
    )
    expected = [
        "rgb({}, {}, {})".format(*(int(c[i : i + 2], 16) for i in (1, 3, 5)))
        for c in (line["color"] for line in drawn)
    ]
    assert colours == expected
    hover(page, key, 60)
    # 2e^-0.6 and 1.5e^-1; a run without that step shows its nearest point, with its step.
    expect(legend.locator(".u-value")).to_have_text(
        ["60", "1.098 (step 60)", "0.5518 (step 60)", "3 (step 0)"]
    )


@pytest.fixture(scope="module")
def wide(tmp_path_factory) -> Iterator[tuple[ServerHandle, str]]:
    """A server of its own with one run of MANY keys of 3 steps each."""
    handle = serve_in_thread(tmp_path_factory.mktemp("wide") / "data")
    with httpx.Client(base_url=handle.url + "/api/v1", timeout=patience.SETTLE) as http:
        run = http.post("/runs", json={"kind": "train", "name": "wide"}).json()
        rows = [
            {"step": step, "values": {f"m/k{i:03d}": float(i + step) for i in range(MANY)}}
            for step in range(3)
        ]
        body = b"".join(orjson.dumps(row) + b"\n" for row in rows)
        assert http.post(f"/runs/{run['id']}/metrics", content=body).status_code == 200
        assert http.post(f"/runs/{run['id']}/finish", json={"status": "completed"}).is_success
    yield handle, run["id"]
    handle.stop()


def test_a_grid_of_many_charts_draws_those_in_view_and_more_on_scroll(browser, wide):
    handle, run_id = wide
    with own_page(browser, handle.url) as page:
        reads: list[str] = []
        page.on("request", lambda r: reads.append(r.url) if "/metrics?" in r.url else None)
        page.goto(f"/runs/{run_id}")
        charts = page.locator("figure.chart")
        expect(charts).to_have_count(MANY)
        expect(charts.first).to_have_attribute("data-drawn", "true")
        in_view = charts.evaluate_all(
            "(els) => els.filter((e) => { const r = e.getBoundingClientRect();"
            " return r.bottom > 0 && r.top < innerHeight; }).length"
        )
        for i in range(in_view):
            expect(charts.nth(i)).to_have_attribute("data-drawn", "true")
        # The charts far from the viewport are not read, nor drawn.
        drawn = page.locator('figure.chart[data-drawn="true"]')
        first = drawn.count()
        assert in_view <= first < MANY
        last = f"m/k{MANY - 1:03d}"
        assert not [url for url in reads if "m%2Fk119" in url or last in url]
        expect(charts.last).not_to_have_attribute("data-drawn", "true")
        # Scrolled to the end: the last charts are read and drawn, with their values.
        charts.last.scroll_into_view_if_needed()
        expect(charts.last).to_have_attribute("data-drawn", "true")
        assert drawn.count() > first
        assert lines(page, last, "value")[0]["y"] == [MANY - 1.0, float(MANY), MANY + 1.0]
        # Each x menu lists the keys when it is focused, not before (MANY menus of MANY
        # options each would be MANY² elements).
        menus = page.locator("select.x-key")
        assert page.locator("select.x-key option").count() == menus.count() == MANY
        menus.last.focus()
        expect(menus.last.locator("option")).to_have_count(MANY)  # the axis, every other key
        assert page.locator("select.x-key option").count() == 2 * MANY - 1


NOISY = "train/noisy"  # 2,000 steps: bucketed at any chart's width, so it has min/max bands


@pytest.fixture(scope="module")
def six(tmp_path_factory) -> Iterator[tuple[ServerHandle, list[str]]]:
    """A server of its own with six runs of one noisy key of 2,000 steps."""
    handle = serve_in_thread(tmp_path_factory.mktemp("six") / "data")
    ids = []
    with httpx.Client(base_url=handle.url + "/api/v1", timeout=patience.SETTLE) as http:
        for r in range(6):
            run = http.post("/runs", json={"kind": "train", "name": f"six-{r}"}).json()
            rows = [
                {"step": s, "values": {NOISY: float(r + (s * 7919 % 13) / 13)}} for s in range(2000)
            ]
            body = b"".join(orjson.dumps(row) + b"\n" for row in rows)
            assert http.post(f"/runs/{run['id']}/metrics", content=body).status_code == 200
            assert http.post(f"/runs/{run['id']}/finish", json={"status": "completed"}).is_success
            ids.append(run["id"])
    yield handle, ids
    handle.stop()


def test_a_compare_of_more_than_four_runs_draws_each_run_as_its_line_alone(browser, six):
    handle, ids = six
    with own_page(browser, handle.url) as page:
        # Four runs: each its line and its min/max band.
        page.goto(f"/compare?runs={','.join(ids[:4])}")
        chart = page.locator(f'figure.chart[data-key="{NOISY}"]')
        expect(chart).to_have_attribute("data-drawn", "true")
        assert len(lines(page, NOISY, "max")) == len(lines(page, NOISY, "min")) == 4
        # Six: each run one line, 1 px, holding what the API answers for that run.
        page.goto(f"/compare?runs={','.join(ids)}")
        expect(chart).to_have_attribute("data-drawn", "true")
        drawn = lines(page, NOISY)
        assert [line["meta"] for line in drawn] == ["value"] * 6
        assert [line["width"] for line in drawn] == [1] * 6
        width = page.eval_on_selector(plot(NOISY), "(el) => el.seriesChart.width()")
        answer = page.request.get(
            "/api/v1/metrics",
            params={"runs": ",".join(ids), "keys": NOISY, "max_points": width},
        ).json()
        for run_id, line in zip(ids, drawn, strict=True):
            series = answer["runs"][run_id]["series"][NOISY]
            assert line["x"] == series["step"] and line["y"] == series["value"]
            assert len(series["step"]) < 2000  # bucketed: there were bands to leave out


def test_a_compare_of_more_runs_than_one_read_gives_reads_them_all(browser, tmp_path):
    """101 runs: more than one listing (50 ids) and one keys read (100 runs) give; every run is
    chosen, and the key only the last run logged is charted too."""
    handle = serve_in_thread(tmp_path / "data")
    try:
        ids = []
        with httpx.Client(base_url=handle.url + "/api/v1", timeout=patience.SETTLE) as http:
            for r in range(101):
                run = http.post("/runs", json={"kind": "train", "name": f"many-{r}"}).json()
                values = {"train/common": float(r), **({"train/last": 1.0} if r == 100 else {})}
                rows = b"".join(orjson.dumps({"step": s, "values": values}) + b"\n" for s in (0, 1))
                assert http.post(f"/runs/{run['id']}/metrics", content=rows).status_code == 200
                ids.append(run["id"])
        with own_page(browser, handle.url) as page:
            page.goto(f"/compare?runs={','.join(ids)}")
            expect(page.locator("#chosen li")).to_have_count(101)
            for key in ("train/common", "train/last"):
                chart = page.locator(f'figure.chart[data-key="{key}"]')
                expect(chart).to_have_attribute("data-drawn", "true")
            expect(page.locator("#error")).to_be_hidden()
    finally:
        handle.stop()
