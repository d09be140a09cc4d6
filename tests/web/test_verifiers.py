"""
verifiers episodes as the unmodified prime-runs SDK sends them, in the dashboard (issue 24):
scored traces have a reward (score x weight: verifiers 0.4.0 serializes no `Trace.reward`), an
eval episode opened from its step has that step and its neighbours, a failed episode without a
trace previews its task's prompt, a step's mean reward is given both ways, a failed Prime run's
error is where its link says, and a config sent as a mapping is not called "exactly as
launched".
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from playwright.sync_api import expect

from openruns.server import serve_in_thread
from tests.prime.helpers import assert_clean, run_sdk

EVAL = """
from tests.prime.verifiers_like import Error, Reward
eps = [episode(i, judge=i == 0, reward=1.0) for i in range(3)]
# Weighted components: 1.0 * 0.5 + 0.25 = 0.75.
eps[1].traces[0].rewards = {"correct": Reward(score=1.0, weight=0.5), "format": Reward(score=0.25)}
eps[2].traces[0].rewards = {"correct": None}  # scoring did not run
failed = episode(3)
failed.traces = []  # failed before any agent ran: only its task
failed.ok = False
failed.errors = [Error(type="TimeoutError", message="the sandbox timed out")]
run = pr.init(environments=["gsm8k"], model="Qwen/Qwen3-8B", config={"temperature": 0.7})
run.log_episodes(eps + [failed])
run.finish(pr.metrics.from_episodes(eps[:2]))  # (the stand-in sums no None)
report(run, ids=[e.id for e in eps + [failed]])
"""

FAILED = """
run = pr.init(environments=["gsm8k"], model="Qwen/Qwen3-8B")
run.fail("RuntimeError: the evaluation lost its sandbox")
report(run)
"""


@dataclass
class Prime:
    url: str
    eval: str
    episodes: list[str]  # scored with a judge, weighted, unscored, failed without a trace
    failed: str


@pytest.fixture(scope="module")
def prime(tmp_path_factory) -> Iterator[Prime]:
    handle = serve_in_thread(tmp_path_factory.mktemp("verifiers-data"))
    home = tmp_path_factory.mktemp("verifiers-home")
    report, stderr = run_sdk(EVAL, home, handle.url)
    assert_clean(report, stderr)
    failed, stderr = run_sdk(FAILED, home, handle.url)
    assert failed["status"] == "failed", stderr
    yield Prime(handle.url, report["id"], report["ids"], failed["id"])
    handle.stop()


def test_scored_traces_have_their_reward_by_score_and_weight(page, prime):
    scored, weighted = prime.episodes[:2]
    page.goto(f"{prime.url}/runs/{prime.eval}/episodes/{weighted}")
    facts = page.locator("#traces .trace .facts")
    expect(facts.first.locator("dd").first).to_have_text("0.75")
    expect(page.locator("#episode-header .facts")).to_contain_text("Reward0.75")
    page.goto(f"{prime.url}/runs/{prime.eval}/episodes/{scored}")
    rewards = page.locator("#traces .trace .facts dd:first-of-type")
    expect(rewards).to_have_text(["1", "1"])  # the solver's and the judge's


def test_an_eval_episode_opened_from_its_step_has_the_step_and_neighbours(page, prime):
    page.goto(f"{prime.url}/runs/{prime.eval}/steps/0")
    rows = page.locator("#episodes tbody tr")
    expect(rows).to_have_count(4)
    rows.nth(1).click()  # by reward: 1, 0.75, then the unscored ones
    page.wait_for_url(f"**/episodes/{prime.episodes[1]}")
    expect(page.locator("#step-link")).to_have_text("step 0")
    expect(page.locator("#position")).to_have_text("2 of 4 at this step")
    expect(page.locator("#prev-episode")).to_be_visible()
    expect(page.locator("#next-episode")).to_be_visible()
    page.keyboard.press("ArrowLeft")
    page.wait_for_url(f"**/episodes/{prime.episodes[0]}")


def test_a_failed_episode_previews_its_tasks_prompt(page, prime):
    failed = prime.episodes[3]
    page.goto(f"{prime.url}/runs/{prime.eval}/steps/0")
    row = page.locator(f'#episodes tbody tr[data-id="{failed}"]')
    expect(row.locator("td.preview.prompt")).to_have_text("What is 3*7?")
    expect(row.locator("td.preview.answer")).to_have_text("21")
    page.goto(f"{prime.url}/runs/{prime.eval}/episodes/{failed}")
    untraced = page.locator("#traces .untraced")
    expect(untraced).to_contain_text("No trace was recorded")
    expect(untraced).to_contain_text("What is 3*7?")
    expect(page.locator("#episode-header .error-box")).to_contain_text("the sandbox timed out")


def test_a_steps_mean_reward_is_given_both_ways(page, prime):
    # Scored: 1 and 0.75; unscored: one whose scoring did not run, one without a trace.
    page.goto(f"{prime.url}/runs/{prime.eval}/steps/0")
    expect(page.locator("#step-stats")).to_contain_text(
        "mean reward 0.875 of the 2 scored, 0.4375 counting the 2 unscored as 0"
    )
    page.goto(f"{prime.url}/runs/{prime.eval}")
    cell = page.locator("#steps-table tbody tr").first.locator("td").nth(2)
    expect(cell).to_have_text("0.875 (0.4375 with 2 unscored as 0)")


def test_a_config_sent_as_a_mapping_is_not_called_exactly_as_launched(page, prime):
    page.goto(f"{prime.url}/runs/{prime.eval}")
    label = page.locator("#config-label")
    expect(label).to_contain_text("a mapping, as sent, stored as JSON")
    expect(label).not_to_contain_text("exactly as launched")


def test_a_failed_prime_runs_error_is_where_it_points(page, prime):
    page.goto(f"{prime.url}/runs/{prime.failed}")
    box = page.locator(".error-box")
    expect(box).to_contain_text("the evaluation lost its sandbox")
    expect(box.locator(".no-logs")).to_contain_text("this error is all it reported")
    expect(box.locator("a.to-logs")).to_have_count(0)
