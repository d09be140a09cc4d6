"""The dashboard's pages in a real browser, over runs seeded through the SDK."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from .chart_view import drag, lines
from .seed import (
    BARE_TRACES,
    EPISODES_PER_STEP,
    LONG_TEXT,
    SPIKE,
    SPIKE_STEP,
    SPIKY_STEPS,
    TRAIN_STEPS,
)


def chart(page, key: str):
    return page.locator(f'figure.chart[data-key="{key}"]')


def test_runs_table_lists_filters_and_opens_by_keyboard(page, seeded, screenshot):
    page.goto("/")
    rows = page.locator("#runs tbody tr")
    expect(rows).to_have_count(3)
    # Newest first.
    expect(rows.nth(0)).to_contain_text("web-failed")
    expect(rows.nth(2)).to_contain_text("web-train")
    expect(rows.nth(0).locator(".badge")).to_have_text("failed")
    # Latest values of key metrics fill in as columns: a reward (from the summary here), the
    # loss every run logged.
    head = page.locator("#runs-head th")
    expect(head).to_have_text(
        ["Select", "Status", "Kind", "Name", "Model", "Started", "Duration"]
        + ["avg_reward", "train/loss", "final/loss"]
    )
    expect(rows.nth(1).locator("td").nth(7)).to_have_text("0.42")
    expect(rows.nth(2).locator("td").nth(8)).to_have_text("0.1006")
    screenshot(page, "runs")

    page.fill("#f-name", "eval")
    expect(rows).to_have_count(1)
    expect(rows.nth(0)).to_contain_text("web-eval")
    assert "name=eval" in page.url
    page.fill("#f-name", "")
    page.select_option("#f-status", "failed")
    expect(rows).to_have_count(1)
    expect(rows.nth(0)).to_contain_text("web-failed")
    page.select_option("#f-status", "")
    page.select_option("#f-kind", "eval")
    expect(rows).to_have_count(1)
    page.select_option("#f-kind", "")
    expect(rows).to_have_count(3)

    # Keyboard: focus the first row, move down twice, Enter opens web-train.
    rows.nth(0).focus()
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/runs/{seeded.train}")
    expect(page.locator("#run-header h1")).to_contain_text("web-train")


def test_runs_table_pages_on_the_server(page, seeded):
    # limit is fixed at 50 a page; three runs fit on one page and there is no older page.
    page.goto("/")
    expect(page.locator("#runs tbody tr")).to_have_count(3)
    expect(page.locator("#page-older")).to_be_disabled()
    expect(page.locator("#page-newer")).to_be_disabled()


def test_run_page_charts_every_point_and_keeps_spikes(page, seeded):
    page.goto(f"/runs/{seeded.train}")
    header = page.locator("#run-header")
    expect(header.locator(".badge").first).to_have_text("completed")
    expect(header).to_contain_text("No records lost")
    # In sections (by step, eval, by wall time), grouped by prefix, one chart per key; the
    # episodes' reward bands in a group first.
    expect(page.locator(".section-title")).to_have_count(4)
    expect(page.locator(".group h4")).to_have_text(
        ["rewards of episodes", "train", "eval", "inference", "cpu", "memory"]
    )
    expect(page.locator("figure.chart:not(.bands)")).to_have_count(7)
    expect(page.locator("figure.chart.bands")).to_have_count(1)

    # Fewer points than pixels: every point is drawn.
    loss = chart(page, "train/loss")
    expect(loss).to_have_attribute("data-points", str(TRAIN_STEPS))
    expect(loss).to_have_attribute("data-downsampled", "false")

    # More points than pixels: at most one bucket per pixel, and the spike is in the band.
    grad = chart(page, "train/grad_norm")
    expect(grad).to_have_attribute("data-downsampled", "true")
    drawn = int(grad.get_attribute("data-points"))
    width = page.eval_on_selector(
        'figure.chart[data-key="train/grad_norm"] .plot', "(el) => el.clientWidth"
    )
    assert 50 < drawn <= width < SPIKY_STEPS
    assert max(lines(page, "train/grad_norm", "max")[0]["y"]) == SPIKE

    # Zooming in asks the server for the finer range: single points again, spike included.
    drag(page, "train/grad_norm", SPIKE_STEP - 30, SPIKE_STEP + 30)
    expect(grad).to_have_attribute("data-downsampled", "false")
    values = lines(page, "train/grad_norm", "value")[0]
    # The steps under the drag, each one point (the ends are where whole pixels put them,
    # a few steps each here).
    assert values["x"] == list(range(values["x"][0], values["x"][-1] + 1))
    assert values["x"][0] < SPIKE_STEP < values["x"][-1] and 40 < len(values["x"]) < 100
    assert values["y"][values["x"].index(SPIKE_STEP)] == SPIKE
    # Double-click's autorange: the whole run again, bucketed.
    page.dblclick('figure.chart[data-key="train/grad_norm"] .u-over')
    expect(grad).to_have_attribute("data-downsampled", "true")


def test_run_page_config_summary_steps_and_exports(page, seeded):
    page.goto(f"/runs/{seeded.train}")
    # The config exactly as launched, highlighted, with its format and file name.
    expect(page.locator("#config-label")).to_contain_text("format: toml")
    expect(page.locator("#config-label")).to_contain_text("file: rl.toml")
    code = page.locator("#config-body .hl code")
    expect(code).to_contain_text('name = "Qwen/Qwen3-0.6B"')
    assert code.inner_text().startswith("# RL run of the browser tests\n[model]")
    assert page.locator("#config-body .hl span").count() > 5  # tokens got classes
    # Summary, flattened.
    expect(page.locator("#summary-body")).to_contain_text("final/reward")
    expect(page.locator("#summary-body")).to_contain_text("0.99")
    # Steps with episodes, newest first.
    steps = page.locator("#steps-table tbody tr")
    expect(steps).to_have_count(5)
    expect(steps.nth(0)).to_contain_text("step 4")
    # Export links point at the API.
    links = page.locator("#export-links a")
    expect(links).to_have_count(4)
    href = links.nth(0).get_attribute("href")
    assert href == f"/api/v1/runs/{seeded.train}/export/metrics.parquet"
    response = page.request.get(f"/api/v1/runs/{seeded.train}/export/metrics.ndjson")
    assert response.ok and b'"train/loss"' in response.body()


def test_step_slider_marks_the_step_and_links_its_episodes(page, seeded):
    page.goto(f"/runs/{seeded.train}")
    expect(chart(page, "train/loss")).to_have_attribute("data-points", str(TRAIN_STEPS))
    expect(page.locator("#step-number")).to_have_value(str(SPIKY_STEPS - 1))  # follows the end
    page.fill("#step-number", "2")
    page.dispatch_event("#step-number", "change")
    info = page.locator("#step-info")
    expect(info).to_contain_text(f"{EPISODES_PER_STEP} episodes")
    expect(info).to_contain_text("train/loss")
    # The marker is drawn at the step's x.
    expect(chart(page, "train/loss")).to_have_attribute("data-marker", "2")
    info.locator("a").click()
    page.wait_for_url(f"**/runs/{seeded.train}/steps/2")


# Layout shifts (Chromium's Layout Instability API) as a page fills in, no input meanwhile.
SHIFTS = """
window.__shifts = [];
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) if (!e.hadRecentInput) window.__shifts.push(e.value);
}).observe({type: "layout-shift", buffered: true});
"""


# Where an element is drawn, frame by frame while it is shown: each new place, in order.
WHERE_SHOWN = """
window.__where = [];
const follow = () => {
  const el = document.querySelector("SELECTOR");
  if (el && el.checkVisibility({visibilityProperty: true})) {
    const box = el.getBoundingClientRect();
    const at = `${Math.round(box.x)},${Math.round(box.y)}`;
    if (window.__where.at(-1) !== at) window.__where.push(at);
  }
  requestAnimationFrame(follow);
};
requestAnimationFrame(follow);
"""


@pytest.mark.parametrize("which", ["train", "eval", "failed"])
def test_run_page_does_not_move_under_the_reader_as_it_fills_in(page, seeded, which):
    """The header, the step slider and the charts come after the page: shown before them, the
    tabs and the overview moved ~190 px down (a cumulative layout shift of 0.29-0.92; Google's
    "good" is at most 0.1), under a pointer aimed at them."""
    page.add_init_script(SHIFTS)
    page.goto(f"/runs/{getattr(seeded, which)}")
    expect(page.locator("#run-header h1")).to_be_visible()
    expect(page.locator("#tab-overview")).to_be_visible()
    expect(page.locator("body[data-live]")).to_have_count(1)  # the first poll is done
    # Every chart in sight drawn (those of the collapsed system section wait to be opened).
    expect(page.locator("figure.chart:not([data-drawn=true]) >> visible=true")).to_have_count(0)
    page.wait_for_timeout(500)  # late shifts, after the charts, are counted too
    shifts = page.evaluate("window.__shifts")
    assert sum(shifts) < 0.1, shifts


def test_failed_run_shows_its_error(page, seeded):
    page.goto(f"/runs/{seeded.failed}")
    expect(page.locator("#run-header .badge").first).to_have_text("failed")
    expect(page.locator(".error-box")).to_contain_text("CUDA out of memory")


def test_step_lists_episodes_sorted_by_reward_and_filters(page, seeded):
    page.goto(f"/runs/{seeded.train}/steps/3")
    rows = page.locator("#episodes tbody tr")
    expect(rows).to_have_count(EPISODES_PER_STEP)
    rewards = [float(r) for r in rows.evaluate_all("(rows) => rows.map((r) => r.dataset.reward)")]
    assert rewards == sorted(seeded.rewards[3], reverse=True)
    expect(page.locator("#step-stats")).to_contain_text(f"{EPISODES_PER_STEP} episodes")

    page.select_option("#f-sort", "reward")
    expect(rows.nth(0)).to_have_attribute("data-reward", str(min(seeded.rewards[3])))
    page.select_option("#f-env", "math")
    expect(rows).to_have_count(EPISODES_PER_STEP // 2)
    for cell in rows.locator("td.env").all_inner_texts():
        assert cell == "math"
    assert "env=math" in page.url
    # Neighbouring steps.
    page.click("#step-next")
    page.wait_for_url(re.compile(r".*/steps/4\?.*env=math.*"))


def test_episode_page_shows_its_raw_record_toggle_where_it_stays(page, seeded):
    """The toggle of the raw record sits under the traces: shown before they came, it sat under
    the nav and moved down with them, under a pointer aimed at it."""
    page.add_init_script(WHERE_SHOWN.replace("SELECTOR", "#raw summary"))
    page.goto(f"/runs/{seeded.train}/episodes/{seeded.episodes[1][0]['id']}")
    expect(page.locator("#traces article.message").first).to_be_visible()
    expect(page.locator("#raw summary")).to_be_visible()
    page.wait_for_timeout(300)
    assert len(page.evaluate("window.__where")) == 1, page.evaluate("window.__where")


def test_episode_shows_messages_tool_calls_and_folds_long_text(page, seeded, screenshot):
    page.goto(f"/runs/{seeded.train}/steps/1?sort=step")
    rows = page.locator("#episodes tbody tr")
    expect(rows).to_have_count(EPISODES_PER_STEP)
    rows.nth(0).focus()
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(rf".*/episodes/{seeded.long_episode}\?sort=step$"))

    messages = page.locator("article.message")
    expect(messages).to_have_count(5)
    roles = messages.evaluate_all("(els) => els.map((e) => e.dataset.role)")
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    expect(messages.nth(2).locator(".tool-call")).to_contain_text("calculator")
    expect(messages.nth(3)).to_contain_text("result of calculator call_0")
    expect(page.locator("#episode-header")).to_contain_text("not ok")
    expect(page.locator("#episode-header .error-box")).to_contain_text("the sandbox timed out")
    expect(page.locator("table.rewards")).to_contain_text("correct")

    # The long answer is folded, says how much is hidden, and unfolds whole.
    last = messages.nth(4)
    fold = last.locator("button.fold")
    expect(fold).to_contain_text("more characters")
    shown = last.locator("pre").inner_text()
    assert len(shown) < len(LONG_TEXT) and LONG_TEXT.startswith(shown)
    screenshot(page, "episode", full_page=True)
    fold.click()
    assert last.locator("pre").inner_text() == LONG_TEXT
    expect(fold).to_have_text("Show less")

    # The whole record, on demand.
    page.click("#raw summary")
    expect(page.locator("#raw-body")).to_contain_text(seeded.long_episode)


def test_compare_page_does_not_move_its_search_box_as_it_fills_in(page, seeded):
    """The chosen runs' chips come after the page: the box to add a run, shown before them,
    moved down by their height (~200 px for 20 runs) under a pointer aimed at it."""
    page.add_init_script(WHERE_SHOWN.replace("SELECTOR", "#pick-name"))
    page.goto(f"/compare?runs={seeded.train},{seeded.eval},{seeded.failed}")
    expect(page.locator("#chosen li")).to_have_count(3)
    expect(chart(page, "train/loss")).to_have_attribute("data-drawn", "true")
    page.wait_for_timeout(300)
    assert len(page.evaluate("window.__where")) == 1, page.evaluate("window.__where")


def test_compare_overlays_two_runs(page, seeded, screenshot):
    page.goto(f"/compare?runs={seeded.train},{seeded.eval}")
    expect(page.locator("#chosen li")).to_have_count(2)
    loss = chart(page, "train/loss")
    expect(loss).to_have_attribute("data-points", f"{TRAIN_STEPS},{TRAIN_STEPS}")
    drawn = lines(page, "train/loss", "value")
    assert len(drawn) == 2
    assert drawn[0]["y"][0] == 2.0 and drawn[1]["y"][0] == 1.5
    names = [line["name"] for line in drawn]
    # Name and short id: runs of one name stay apart.
    assert names == [f"web-train · {seeded.train[-6:]}", f"web-eval · {seeded.eval[-6:]}"]
    screenshot(page, "compare")

    # Remove one, add it back through the picker.
    page.click(f'#chosen li[data-run-id="{seeded.eval}"] button')
    expect(page.locator("#chosen li")).to_have_count(1)
    page.fill("#pick-name", "web-eval")
    page.click("#pick-results button:has-text('Add web-eval')")
    expect(page.locator("#chosen li")).to_have_count(2)
    expect(chart(page, "train/loss")).to_have_attribute(
        "data-points", f"{TRAIN_STEPS},{TRAIN_STEPS}"
    )
    assert seeded.eval in page.url


def test_compare_selected_from_the_runs_table(page, seeded):
    page.goto("/")
    rows = page.locator("#runs tbody tr")
    expect(rows).to_have_count(3)
    rows.nth(1).locator("input[type=checkbox]").check()
    rows.nth(2).locator("input[type=checkbox]").check()
    page.click("#compare-selected")
    page.wait_for_url("**/compare?runs=*")
    expect(page.locator("#chosen li")).to_have_count(2)


def test_bare_traces_have_their_stream_and_page(page, seeded):
    page.goto(f"/runs/{seeded.train}/steps/0?stream=traces")
    expect(page.locator("#f-stream")).to_have_value("traces")
    rows = page.locator("#episodes tbody tr")
    expect(rows).to_have_count(BARE_TRACES)
    expect(page.locator("#step-stats")).to_contain_text(
        f"{BARE_TRACES} traces dispatched at this step"
    )
    rows.nth(0).click()
    page.wait_for_url("**/episodes/*")
    expect(page.locator("#episode-header h1")).to_contain_text("Trace")
    expect(page.locator("article.message")).to_have_count(5)
    # Back to episodes through the stream filter.
    page.go_back()
    page.select_option("#f-stream", "episodes")
    expect(rows).to_have_count(EPISODES_PER_STEP)
