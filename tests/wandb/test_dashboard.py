"""
The dashboard showing a W&B-logged run, in Debian's Chromium driven by Playwright as
tests/web does: the real wandb 0.31.0 SDK logs a run into a real server, then the runs page
lists it in its project (filter and column), and the run page shows its W&B facts, draws a
metric defined with a step metric against it (and against another metric when one is chosen),
shows its console output, and its Stop button reaches the SDK's run.
"""

from __future__ import annotations

import uuid

import pytest
from playwright.sync_api import expect

from ..browser import own_page
from ..web.chart_view import axes
from .helpers import LOOP, end, run_script, start_script, wait_exit, wait_ready

SCRIPT = """
import sys, wandb
run = wandb.init(project="dash-proj", id=sys.argv[1], name="wandb on the dashboard",
                 job_type="grpo", config={"lr": 0.01})
run.define_metric("env/step")
run.define_metric("env/reward", step_metric="env/step")
for i in range(5):
    run.log({"loss": 1.0 / (i + 1), "env/step": 10 * i, "env/reward": i / 4})
print("a line for the logs tab")
run.finish()
"""


@pytest.fixture(scope="module")
def logged(server, tmp_path_factory):
    run_id = f"d{uuid.uuid4().hex[:10]}"
    run_script(tmp_path_factory.mktemp("dash"), SCRIPT, server.url, run_id)
    return run_id


@pytest.fixture
def page(browser, server):
    with own_page(browser, server.url) as page:
        yield page


def test_the_runs_page_lists_the_run_in_its_project(page, logged):
    page.goto("/?project=dash-proj")
    row = page.locator("#runs tbody tr", has_text="wandb on the dashboard")
    expect(row).to_have_count(1)
    page.click("#columns summary")
    page.check('#columns-fixed input[value="Project"]')  # a column to choose, as Group is
    expect(row).to_contain_text("dash-proj")
    expect(row).to_contain_text("completed")
    page.fill("#f-project", "no-such-project")
    expect(page.locator("#runs-empty")).to_be_visible()


def test_the_run_page_shows_its_wandb_side_and_draws_against_the_step_metric(page, logged):
    page.goto(f"/runs/{logged}")
    header = page.locator("#run-header")
    expect(header).to_contain_text("wandb on the dashboard")
    expect(header).to_contain_text("dash-proj")
    expect(header).to_contain_text("grpo")  # the job type
    expect(header).to_contain_text("CPython 3.")  # wandb-metadata.json
    reward = page.locator('figure.chart[data-key="env/reward"]')
    expect(reward).to_have_attribute("data-drawn", "true")
    expect(reward).to_have_attribute("data-x", "env/step")
    assert axes(page, "env/reward")["x"]["title"] == "env/step"  # the title drawn under it
    loss = page.locator('figure.chart[data-key="loss"]')
    expect(loss).to_have_attribute("data-x", "step")
    menu = loss.locator("select.x-key")
    menu.focus()  # as a click or Tab does: the menu lists the keys when it is focused
    menu.select_option("env/step")  # any metric as the x axis
    expect(loss).to_have_attribute("data-x", "env/step")
    assert axes(page, "loss")["x"]["title"] == "env/step"
    page.click("#tab-logs")
    expect(page.locator("#log-lines")).to_contain_text("a line for the logs tab")


@pytest.mark.slow
def test_the_stop_button_reaches_the_sdk_and_the_run_ends_cancelled(page, server, tmp_path):
    run_id = f"d{uuid.uuid4().hex[:10]}"
    proc = start_script(tmp_path, LOOP, server.url, run_id)
    try:
        wait_ready(proc)
        page.goto(f"/runs/{run_id}")
        page.click("#stop-run")
        expect(page.locator("#stop-requested")).to_be_visible()
        wait_exit(proc, tmp_path)  # the SDK polls its stop status every 15 s
    finally:
        output = end(proc)
    assert "KeyboardInterrupt" in output
    expect(page.locator("#run-header .badge").first).to_have_text("cancelled", timeout=60_000)
