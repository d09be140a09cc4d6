"""
The dashboard's rough edges a new user met in its screenshots (issue 24): the step table fits
the window, a cancelled run is no error, progress counts steps from 0, a one-step eval shows
values, one-chart groups span the width, the system section waits to be opened, the Logs tab
lists every stream in printing order, the traceback link goes where the error is, and what is
not there says so (an unknown run, an unknown page).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from playwright.sync_api import expect

import openruns
from openruns.server import serve_in_thread

from ..patience import REQUEST
from .seed import post_logs


@dataclass
class Runs:
    url: str
    cancelled: str
    one_step_eval: str
    progress: str
    components: str
    silent_failure: str
    killed_writer: str


ONE_STEP_METRICS = {"eval/accuracy": 0.75, "eval/tokens": 1234.0}
SHOWN = {"eval/accuracy": "0.75", "eval/tokens": "1234"}  # as the cells keep them
MAX_STEPS = 120


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Iterator[Runs]:
    """A server of this module's own (the seeded one keeps exactly its runs), with a run for
    each edge, made through the SDK."""
    handle = serve_in_thread(tmp_path_factory.mktemp("edges-data"))
    local = tmp_path_factory.mktemp("edges-local")
    with pytest.MonkeyPatch.context() as patch:
        for name in list(os.environ):
            if name.startswith("OPENRUNS_") or name in ("RUN_ID", "RANK", "LOCAL_RANK"):
                patch.delenv(name)
        patch.setenv("OPENRUNS_CONFIG_FILE", str(local / "no-config.toml"))
        common = {
            "base_url": handle.url,
            "dir": local,
            "system_metrics_interval": 0,
            "capture_console": False,
        }

        def init(**kwargs):
            for name in ("OPENRUNS_RUN_ID", "OPENRUNS_RUN_PID", "OPENRUNS_RUN_KIND"):
                os.environ.pop(name, None)
            return openruns.init(**common, **kwargs)

        cancelled = init(kind="train", name="edge-cancelled")
        cancelled.log_metrics({"train/loss": 1.0}, step=0)
        cancelled.finish(status="cancelled", error="stopped by the scheduler (preempted)")

        evaluation = init(kind="eval", name="edge-one-step-eval")
        evaluation.log_metrics(ONE_STEP_METRICS, step=0)
        evaluation.log_episodes(
            [
                {"id": f"e{i}", "prompt": "2+2?", "completion": "4", "reward": i / 2}
                for i in range(3)
            ],
            step=0,
        )
        evaluation.finish()

        progress = init(
            kind="train", name="edge-progress", training=openruns.TrainingSpec(max_steps=MAX_STEPS)
        )
        for step in range(MAX_STEPS):
            progress.log_metrics({"train/loss": 1.0 / (step + 1)}, step=step)
        progress.finish()

        components = init(kind="train", name="edge-components")
        t0 = time.time()
        # As `openruns launch` sends its components' files: one file's batch, then the other's.
        post_logs(
            handle.url,
            components.id,
            [
                {"ts": t0 + i * 2, "stream": "output", "source": "trainer", "line": f"trainer {i}"}
                for i in range(3)
            ]
            + [
                {
                    "ts": t0 + i * 2 + 1,
                    "stream": "output",
                    "source": "orchestrator",
                    "line": f"orch {i}",
                }
                for i in range(3)
            ]
            + [{"ts": t0 + 10, "stream": "stdout", "source": "main", "line": "done"}],
        )
        components.finish()

        silent = init(kind="train", name="edge-silent-failure")
        silent.fail("RuntimeError: the platform reported the job failed")

        # As a launcher closes a run one of whose components was SIGKILLed after its grace,
        # and another spooled what the server could not take (the SDK's losses, issue 24).
        with httpx.Client(base_url=handle.url + "/api/v1", timeout=30) as api:
            killed = api.post("/runs", json={"kind": "train", "name": "edge-killed-writer"}).json()
            losses = {
                "dropped_records": 0,
                "failed_records": {},
                "unclosed_writers": 1,
                "spooled_records": 12,
                "spool": {"host": "node-7", "dir": "/scratch/openruns-runs/r1"},
            }
            body = {"status": "failed", "error": "terminated by SIGTERM", "losses": losses}
            api.post(f"/runs/{killed['id']}/finish", json=body).raise_for_status()
    yield Runs(
        handle.url, cancelled.id, evaluation.id, progress.id, components.id, silent.id, killed["id"]
    )
    handle.stop()


@pytest.fixture
def lenient_page(context) -> Iterator:
    """A page for addresses that answer 404 (Chromium logs each as a console error): only
    JavaScript errors fail the test."""
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    page.close()
    assert not errors, errors


def overflow(page) -> int:
    """How many pixels the page is wider than the window."""
    return page.evaluate("document.documentElement.scrollWidth - window.innerWidth")


@pytest.mark.parametrize("width", [1280, 1440, 1600])
def test_the_step_table_fits_the_window(page, seeded, width):
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"/runs/{seeded.train}/steps/1")  # its failed episode's answer is long
    expect(page.locator("#episodes tbody")).to_have_attribute("data-previews", "loaded")
    assert overflow(page) <= 0
    table = page.locator("#episodes")
    assert table.evaluate("(t) => t.scrollWidth <= t.parentElement.clientWidth")


def test_losses_name_a_killed_writer_and_the_spool(page, runs):
    page.goto(f"{runs.url}/runs/{runs.killed_writer}")
    losses = page.locator("#losses")
    expect(losses).to_have_class("losses warn")
    expect(losses).to_contain_text(
        "1 process ended without closing the run (killed?): what they had not sent is lost"
    )
    expect(losses).to_contain_text(
        "12 records wait in a local spool (node-7:/scratch/openruns-runs/r1; upload them with"
    )


def test_a_cancelled_run_is_not_shown_as_an_error(page, runs):
    page.goto(f"{runs.url}/runs/{runs.cancelled}")
    header = page.locator("#run-header")
    expect(header.locator(".badge.status-cancelled")).to_have_text("cancelled")
    box = header.locator(".note-box.cancelled")
    expect(box).to_contain_text("Cancelled")
    expect(box).to_contain_text("stopped by the scheduler (preempted)")
    expect(header.locator(".error-box")).to_have_count(0)
    # Neutral: the box is not in the error colours.
    assert box.evaluate("(b) => getComputedStyle(b).backgroundColor") == "rgb(246, 248, 250)"


def test_progress_counts_steps_from_zero(page, runs):
    page.goto(f"{runs.url}/runs/{runs.progress}")
    progress = page.locator("#run-header dd", has_text="steps")
    expect(progress).to_have_text(f"{MAX_STEPS} of {MAX_STEPS} steps (steps 0–{MAX_STEPS - 1})")


def test_a_one_step_eval_shows_its_metrics_as_values(page, runs, screenshot):
    page.goto(f"{runs.url}/runs/{runs.one_step_eval}")
    section = page.locator('[data-section="eval"]')
    rows = section.locator("table.values tbody tr")
    expect(rows).to_have_count(len(ONE_STEP_METRICS))
    for key in ONE_STEP_METRICS:
        row = section.locator(f'table.values tr[data-key="{key}"]')
        expect(row.locator("td").first).to_have_attribute("data-value", SHOWN[key])
        expect(row).to_contain_text("at step 0")
    # A bar for the accuracy (in [0, 1]), none for a count.
    expect(section.locator('tr[data-key="eval/accuracy"] meter')).to_have_attribute("value", "0.75")
    expect(section.locator('tr[data-key="eval/tokens"] meter')).to_have_count(0)
    # No chart of a lone dot, no band chart of one step, and no "No metrics were logged".
    expect(page.locator("#steps-table tbody tr")).to_have_count(1)
    expect(page.locator("figure.chart")).to_have_count(0)
    expect(page.locator("#charts-empty")).to_be_hidden()
    screenshot(page, "one-step-eval")


def test_a_group_of_one_chart_spans_the_width(page, seeded):
    page.goto(f"/runs/{seeded.train}")
    chart = page.locator('[data-section="eval"] figure.chart')
    expect(chart).to_have_count(1)
    expect(chart).to_have_attribute("data-drawn", "true")
    width = chart.evaluate("(c) => [c.offsetWidth, c.parentElement.clientWidth]")
    assert width[0] >= width[1] - 2, width


def test_the_system_section_is_collapsed_until_opened_and_the_choice_is_kept(fresh_page, seeded):
    page = fresh_page
    page.goto(f"/runs/{seeded.train}")
    system = page.locator('[data-section="system"]')
    cpu = system.locator('figure.chart[data-key="system/cpu/percent"]')
    expect(page.locator('[data-section="train"] figure.chart').first).to_have_attribute(
        "data-drawn", "true"
    )
    expect(system).not_to_have_attribute("open", "")
    assert cpu.get_attribute("data-drawn") is None  # not read while closed
    tall = page.evaluate("document.documentElement.scrollHeight")
    system.locator("summary.section-summary").click()
    expect(cpu).to_have_attribute("data-drawn", "true")
    assert page.evaluate("document.documentElement.scrollHeight") > tall
    page.reload()
    expect(system).to_have_attribute("open", "")
    expect(cpu).to_have_attribute("data-drawn", "true")


def test_logs_list_every_stream_in_printing_order(page, runs):
    page.goto(f"{runs.url}/runs/{runs.components}#logs")
    lines = page.locator("#log-lines .log-line .text")
    expect(lines).to_have_count(7)
    expect(lines.first).to_be_visible()  # innerText is what is shown: after the first reads
    assert lines.all_inner_texts() == [
        "trainer 0",
        "orch 0",
        "trainer 1",
        "orch 1",
        "trainer 2",
        "orch 2",
        "done",
    ]
    options = page.locator("#log-stream option").evaluate_all("(os) => os.map((o) => o.value)")
    assert options == ["", "stdout", "stderr", "output", "traceback"]
    page.select_option("#log-stream", "output")
    expect(lines).to_have_count(6)
    page.select_option("#log-source", "orchestrator")
    expect(lines).to_have_text(["orch 0", "orch 1", "orch 2"])


def test_a_failed_run_that_printed_nothing_has_no_traceback_link(page, runs, seeded):
    page.goto(f"{runs.url}/runs/{runs.silent_failure}")
    box = page.locator(".error-box")
    expect(box).to_contain_text("the platform reported the job failed")
    expect(box.locator(".no-logs")).to_contain_text("sent no console output")
    expect(box.locator("a.to-logs")).to_have_count(0)
    # A run that printed its traceback links to it.
    page.goto(f"/runs/{seeded.failed}")
    expect(page.locator(".error-box a.to-logs")).to_be_visible()


def test_an_unknown_run_is_a_page_that_says_so(lenient_page, runs):
    page = lenient_page
    for path in ("/runs/nosuchrun", "/runs/nosuchrun/steps/0", "/runs/nosuchrun/search?q=x"):
        page.goto(f"{runs.url}{path}")
        expect(page.locator(".missing h1")).to_have_text("No run nosuchrun")
        expect(page.locator(".missing")).to_contain_text("No run 'nosuchrun'")
        expect(page.locator("#error")).to_be_hidden()
    # Compare says it in its banner, and offers its search box (shown once its reads are in,
    # whatever they did).
    page.goto(f"{runs.url}/compare?runs=nosuchrun")
    expect(page.locator("#error")).to_contain_text("nosuchrun")
    expect(page.locator("#pick-name")).to_be_visible()
    expect(page.locator("#chosen li")).to_have_count(0)
    # A missing run among others: those are compared, the banner names the one not found.
    page.goto(f"{runs.url}/compare?runs={runs.one_step_eval},nosuchrun")
    expect(page.locator("#error")).to_contain_text("No run 'nosuchrun'")
    expect(page.locator("#chosen li")).to_have_count(1)
    expect(page.locator(f"#chosen li[data-run-id='{runs.one_step_eval}']")).to_be_visible()
    page.goto(f"{runs.url}/runs/{runs.one_step_eval}/episodes/nosuchrecord")
    expect(page.locator(".missing h1")).to_have_text("Not found")
    expect(page.locator(".missing")).to_contain_text("nosuchrecord")


def test_an_unknown_page_is_an_html_404_for_a_browser_and_json_for_the_api(lenient_page, runs):
    page = lenient_page
    response = page.goto(f"{runs.url}/no/such/page")
    assert response is not None and response.status == 404
    assert response.headers["content-type"].startswith("text/html")
    expect(page.locator(".missing h1")).to_have_text("Page not found")
    expect(page.locator(".missing a[href='/']")).to_have_text("All runs")
    for path, accept in (("/no/such/page", "application/json"), ("/api/v1/nothing", "text/html")):
        answer = httpx.get(f"{runs.url}{path}", headers={"Accept": accept}, timeout=REQUEST)
        assert answer.status_code == 404
        assert answer.json()["error"]["code"] == "not_found"
