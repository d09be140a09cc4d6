"""A run the unmodified prime-runs SDK made is an ordinary run in the dashboard."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import expect

from openruns.server import serve_in_thread
from tests.prime.helpers import assert_clean, run_sdk


@pytest.fixture
def own_server(tmp_path):
    """A server of this test's own: the session's seeded one keeps exactly its runs."""
    handle = serve_in_thread(tmp_path / "data")
    yield handle
    handle.stop()


def test_a_prime_eval_shows_its_config_summary_and_episodes(own_server, page, tmp_path):
    # own_server before page: the page (and its polls) closes before the server stops.
    server = own_server
    report, stderr = run_sdk(
        """
        eps = [episode(i, judge=True, reward=i / 2) for i in range(3)]
        run = pr.init(environments=["gsm8k"], model="Qwen/Qwen3-8B", config={"temperature": 0.7})
        run.log_episodes(eps)
        run.finish(pr.metrics.from_episodes(eps))
        report(run)
        """,
        tmp_path,
        server.url,
    )
    assert_clean(report, stderr)
    run_id = report["id"]
    page.goto(f"{server.url}/")
    expect(page.locator(f'tr[data-id="{run_id}"], a[href="/runs/{run_id}"]').first).to_be_visible()
    page.goto(f"{server.url}/runs/{run_id}")
    expect(page.locator("#run-header .badge").first).to_have_text("completed")
    expect(page.locator("#config-body")).to_contain_text('"temperature": 0.7')
    expect(page.locator("#summary-body")).to_contain_text("avg_reward")
    # The SDK's own bookkeeping is stored with the run, not shown as its summary (issue 24).
    stored = httpx.get(f"{server.url}/api/v1/runs/{run_id}", timeout=30).json()["summary"]
    assert stored["prime_runs"] == {"traces_episodes_written": 3}, stored
    expect(page.locator("#summary-body")).not_to_contain_text("prime_runs")
    expect(page.locator("#steps-table tbody tr").first).to_contain_text("step 0")
    page.goto(f"{server.url}/runs/{run_id}/steps/0")
    rows = page.locator("#episodes tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.nth(0)).to_have_attribute("data-reward", "1")
