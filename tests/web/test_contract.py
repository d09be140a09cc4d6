"""The run contract in the browser: a step read as dispatched at or trained at, kinds, off-policy
episodes, annotations on the episode page, rows logged without a step charted by wall time,
eval metrics apart from training ones, and the Logs tab."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from .chart_view import axes, lines
from .seed import (
    CONSOLE_LINES,
    EPISODES_PER_STEP,
    EVAL_EPISODES,
    EVAL_STEP,
    FAILED_TRACEBACK,
    TIMED_ROWS,
)


def steps_shown(page) -> list[tuple[str, str, str]]:
    """(step, episodes, off-policy) of each row of the run page's steps table (innerText: as
    shown, so once the overview is, after the page's first reads)."""
    expect(page.locator("#panel-overview")).to_be_visible()
    rows = page.locator("#steps-table tbody tr")
    cells = rows.evaluate_all(
        "(rows) => rows.map((r) => [r.cells[0].innerText, r.cells[1].innerText,"
        " r.cells[3].innerText])"
    )
    return [tuple(row) for row in cells]


def test_steps_table_reads_a_step_as_dispatched_or_trained_and_by_kind(page, seeded):
    page.goto(f"/runs/{seeded.train}")
    rows = page.locator("#steps-table tbody tr")
    expect(rows).to_have_count(5)
    shown = dict((s, (n, off)) for s, n, off in steps_shown(page))
    # Dispatched at step 1, trained at step 2: all six are off-policy; the eval episodes of
    # step 4 count with the train ones until a kind is chosen.
    assert shown["step 1"] == (str(EPISODES_PER_STEP), str(EPISODES_PER_STEP))
    assert shown["step 0"] == (str(EPISODES_PER_STEP), "0")
    assert shown[f"step {EVAL_STEP}"] == (str(EPISODES_PER_STEP + EVAL_EPISODES), "0")

    page.select_option("#steps-by", "trained")
    expect(rows).to_have_count(2)
    assert steps_shown(page) == [
        ("step 2", str(2 * EPISODES_PER_STEP), str(EPISODES_PER_STEP)),
        ("step 0", str(EPISODES_PER_STEP), "0"),
    ]
    # The step page keeps the meaning of a step.
    rows.nth(0).click()
    page.wait_for_url(re.compile(r".*/steps/2\?by=trained$"))
    expect(page.locator("#f-by")).to_have_value("trained")

    page.goto(f"/runs/{seeded.train}")
    page.select_option("#steps-kind", "eval")
    expect(rows).to_have_count(1)
    assert steps_shown(page) == [(f"step {EVAL_STEP}", str(EVAL_EPISODES), "0")]


def test_step_page_by_trained_marks_the_off_policy_episodes(page, seeded, screenshot):
    page.goto(f"/runs/{seeded.train}/steps/2?by=trained")
    rows = page.locator("#episodes tbody tr")
    expect(rows).to_have_count(2 * EPISODES_PER_STEP)
    expect(page.locator("#step-stats")).to_contain_text(
        f"{2 * EPISODES_PER_STEP} episodes trained at this step"
    )
    expect(page.locator("#step-stats")).to_contain_text(f"{EPISODES_PER_STEP} off-policy")
    off = page.locator("#episodes tbody tr.off-policy")
    expect(off).to_have_count(EPISODES_PER_STEP)
    expect(off.first.locator(".badge.off-policy")).to_have_text("off-policy +1")
    ids = set(off.evaluate_all("(rows) => rows.map((r) => r.dataset.id)"))
    assert ids == {e["id"] for e in seeded.episodes[1]}  # dispatched at 1, trained at 2
    # The histogram is of the same records.
    expect(page.locator("#histogram")).to_have_attribute("data-count", str(2 * EPISODES_PER_STEP))
    screenshot(page, "step-trained")

    # Dispatched at 2: the step's own six, trained at once.
    page.select_option("#f-by", "dispatched")
    expect(rows).to_have_count(EPISODES_PER_STEP)
    expect(off).to_have_count(0)
    assert "by=" not in page.url


def test_step_page_filters_by_kind(page, seeded):
    page.goto(f"/runs/{seeded.train}/steps/{EVAL_STEP}")
    rows = page.locator("#episodes tbody tr")
    expect(rows).to_have_count(EPISODES_PER_STEP + EVAL_EPISODES)
    page.select_option("#f-kind", "eval")
    expect(rows).to_have_count(EVAL_EPISODES)
    assert set(rows.evaluate_all("(rows) => rows.map((r) => r.dataset.id)")) == set(
        seeded.eval_episodes
    )
    expect(rows.first.locator(".badge.kind-eval")).to_have_text("eval")
    expect(page.locator("#histogram")).to_have_attribute("data-count", str(EVAL_EPISODES))
    assert "kind=eval" in page.url
    page.select_option("#f-kind", "train")
    expect(rows).to_have_count(EPISODES_PER_STEP)


def test_episode_page_shows_its_annotations_by_producer(page, seeded, screenshot):
    episode = seeded.episodes[1][0]
    page.goto(f"/runs/{seeded.train}/episodes/{episode['id']}")
    facts = page.locator("#episode-header .facts")
    expect(facts).to_contain_text("Trained at")
    expect(facts.locator(".badge.off-policy")).to_have_text("off-policy: dispatched at step 1")
    section = page.locator("#annotations")
    expect(section).to_be_visible()
    expect(section.locator("h2")).to_contain_text("1 from trainer")
    trainer = section.locator('section.producer[data-producer="trainer"]')
    row = trainer.locator("tbody tr")
    expect(row).to_have_count(1)
    expect(row.locator("td").nth(1)).to_have_text("2")
    expect(row).to_contain_text("advantage")
    expect(row).to_contain_text(str(round(episode["traces"][0]["reward"] - 0.5, 3)))
    screenshot(page, "episode-annotations", full_page=True)

    # Opened from the step page's "trained at" view, the breadcrumb and neighbours follow it.
    page.goto(f"/runs/{seeded.train}/episodes/{episode['id']}?by=trained")
    expect(page.locator("#step-link")).to_have_text("step 2 (trained at)")
    expect(page.locator("#position")).to_contain_text(f"of {2 * EPISODES_PER_STEP} at this step")


def test_an_episode_without_annotations_has_no_section(page, seeded):
    page.goto(f"/runs/{seeded.train}/episodes/{seeded.episodes[3][0]['id']}")
    expect(page.locator("#episode-header h1")).to_be_visible()
    expect(page.locator("#annotations")).to_be_hidden()
    expect(page.locator("#episode-header .facts")).not_to_contain_text("Trained at")


def test_rows_without_a_step_are_charted_by_wall_time_apart_from_steps(page, seeded):
    page.goto(f"/runs/{seeded.train}")
    timed = page.locator('[data-section="time"] figure.chart[data-key="inference/tokens_per_s"]')
    expect(timed).to_have_attribute("data-drawn", "true")
    expect(timed).to_have_attribute("data-axis", "time")
    expect(timed).to_have_attribute("data-points", str(TIMED_ROWS))
    plot = '[data-section="time"] figure.chart[data-key="inference/tokens_per_s"] .plot'
    key = "inference/tokens_per_s"
    assert axes(page, key, "time")["x"]["type"] == "date"
    values = lines(page, key, "value", "time")[0]["y"]
    assert values == [1000.0 + 10 * i for i in range(TIMED_ROWS)]
    # Never in a step section; eval metrics in their own section, training ones in theirs.
    expect(page.locator('[data-section="train"] figure.chart[data-axis="time"]')).to_have_count(0)
    expect(page.locator('[data-section="eval"] figure.chart')).to_have_count(1)
    expect(page.locator('[data-section="eval"] figure.chart').first).to_have_attribute(
        "data-key", "eval/reward"
    )
    expect(page.locator('[data-section="train"] figure.chart[data-key^="eval/"]')).to_have_count(0)
    # System metrics in a section of their own, by kind, by wall time, collapsed until opened.
    system = page.locator('[data-section="system"]')
    expect(system.locator(".group h4")).to_have_text(["cpu", "memory"])
    system.locator("summary.section-summary").click()
    expect(system.locator('figure.chart[data-key="system/cpu/percent"]')).to_have_attribute(
        "data-points", str(TIMED_ROWS)
    )
    system.locator("summary.section-summary").click()  # closed again: the browser keeps it
    # Time since start: the same rows in seconds from the run's start.
    page.select_option("#x-axis", "relative")
    page.wait_for_function(
        "(sel) => document.querySelector(sel).seriesChart.axes().x.type === 'linear'", arg=plot
    )
    xs = lines(page, key, "value", "time")[0]["x"]
    assert 0 <= xs[0] < xs[-1] < 600
    page.select_option("#x-axis", "step")


def test_logs_tab_shows_the_output_and_a_failed_runs_traceback_first(page, seeded, screenshot):
    page.goto(f"/runs/{seeded.train}")
    page.click("#tab-logs")
    assert page.url.endswith("#logs")
    lines = page.locator("#log-lines .log-line")
    expect(lines).to_have_count(CONSOLE_LINES + 1)
    expect(lines.nth(0)).to_contain_text("step 0: loss 2.000")
    expect(page.locator("#log-lines .log-line.stderr")).to_contain_text(
        "warning: the learning rate is high"
    )
    expect(page.locator("#log-status")).to_contain_text(f"{CONSOLE_LINES + 1} lines printed")
    expect(page.locator("#log-traceback")).to_be_hidden()  # a completed run
    page.select_option("#log-stream", "stderr")
    expect(lines).to_have_count(1)
    page.click("#tab-overview")
    expect(page.locator("#panel-logs")).to_be_hidden()
    expect(page.locator("#charts")).to_be_visible()

    page.goto(f"/runs/{seeded.failed}")
    page.locator(".error-box a.to-logs").click()
    box = page.locator("#log-traceback")
    expect(box).to_be_visible()
    expect(box).to_contain_text("reported by the process that failed")
    assert page.locator("#traceback-text").inner_text() == FAILED_TRACEBACK
    screenshot(page, "logs")


def test_a_traceback_is_found_in_the_output_when_none_was_reported(page, seeded):
    page.goto(f"/runs/{seeded.train}")
    found = page.evaluate(
        """async () => {
          const { findTraceback } = await import("/static/logs.js");
          const line = (source, text) => ({ source, line: text, ts: 1, stream: "stdout" });
          return findTraceback([
            line("trainer", "Traceback (most recent call last):"),
            line("trainer", "ValueError: an old one"),
            line("trainer", "Traceback (most recent call last):"),
            line("orchestrator", "unrelated"),
            line("trainer", '  File "x.py", line 1, in <module>'),
            line("trainer", "    f()"),
            line("trainer", "RuntimeError: boom"),
            line("trainer", "after"),
          ]);
        }"""
    )
    assert found["source"] == "trainer"
    assert found["line"].splitlines() == [
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in <module>',
        "    f()",
        "RuntimeError: boom",
    ]
