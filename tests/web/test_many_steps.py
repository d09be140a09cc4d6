"""A run of more steps with episodes than one read of /steps gives, in the browser (issue 21): the
run page's steps table reads the newest page and older pages as it is shown more, a step's
page asks for its own row and its neighbours', and no read asks for every step of the run."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from playwright.sync_api import expect

from openruns.server import ServerHandle, serve_in_thread

from .. import patience
from ..browser import own_page
from ..server.helpers import episode, metric_rows, ndjson
from .seed import finished_run

STEPS = 1203  # two pages of 500 and one of 203 (run.js STEPS_PAGE)


@pytest.fixture(scope="module")
def many(tmp_path_factory) -> Iterator[tuple[ServerHandle, str]]:
    """A server of its own with one finished run: an episode at each of STEPS steps, two with no
    step, and one metric at every step (the slider's)."""
    handle = serve_in_thread(tmp_path_factory.mktemp("many-steps") / "data")
    records = [episode(i, step=i, reward=float(i % 2)) for i in range(STEPS)]
    records += [episode(STEPS + i, step=None, reward=None) for i in range(2)]  # type: ignore[arg-type]
    uploads = {"episodes": ndjson(records), "metrics": metric_rows(range(STEPS), loss=1.0)}
    with httpx.Client(base_url=handle.url + "/api/v1", timeout=patience.SETTLE) as http:
        run_id = finished_run(http, "many-steps", uploads)
    yield handle, run_id
    handle.stop()


@pytest.fixture
def page(browser, many) -> Iterator:
    with own_page(browser, many[0].url) as page:
        asked: list[dict[str, list[str]]] = []
        page.on(
            "request",
            lambda request: (
                asked.append(parse_qs(urlparse(request.url).query))
                if urlparse(request.url).path.endswith("/steps")
                else None
            ),
        )
        page.steps_asked = asked
        yield page


def _bounded(query: dict[str, list[str]]) -> bool:
    """A read of a page of steps, or of a range of them: never the whole run."""
    return "limit" in query or ("step_min" in query and "step_max" in query)


def test_the_steps_table_reads_the_newest_page_then_older_ones(page, many):
    _, run_id = many
    page.goto(f"/runs/{run_id}")
    rows = page.locator("#steps-table tbody tr")
    expect(rows).to_have_count(50)
    expect(rows.first).to_contain_text(f"step {STEPS - 1}")
    more = page.locator("#steps-more")
    shown = 50
    for _ in range(10):  # 200 more a click: six clicks show all 1,205 rows
        if not more.is_visible():
            break
        more.click()
        shown = min(shown + 200, STEPS + 1)
        expect(rows).to_have_count(shown)
    expect(more).to_be_hidden()
    expect(rows.nth(STEPS - 1)).to_contain_text("step 0")
    expect(rows.last).to_contain_text("(no step)")
    expect(rows.last).to_contain_text("2")  # its two records
    assert page.steps_asked and all(_bounded(q) for q in page.steps_asked), page.steps_asked
    # The newest page, then the two older ones, each after the oldest step held.
    afters = [q["after"][0] for q in page.steps_asked if "after" in q]
    assert afters == [str(STEPS - 500), str(STEPS - 1000)], page.steps_asked


def test_the_slider_describes_a_step_older_than_the_table_holds(page, many):
    _, run_id = many
    page.goto(f"/runs/{run_id}")
    expect(page.locator("#steps-table tbody tr")).to_have_count(50)
    page.fill("#step-number", "3")
    page.dispatch_event("#step-number", "change")
    expect(page.locator("#step-info")).to_contain_text("1 episodes, mean reward 1")
    assert any(q.get("step_max") == ["3"] for q in page.steps_asked), page.steps_asked


def test_a_steps_page_links_its_neighbours_from_two_small_reads(page, many):
    _, run_id = many
    page.goto(f"/runs/{run_id}/steps/0")
    expect(page.locator("#step-next")).to_be_visible()
    expect(page.locator("#step-prev")).to_be_hidden()
    page.click("#step-next")
    page.wait_for_url(f"**/runs/{run_id}/steps/1")
    expect(page.locator("#step-prev")).to_be_visible()
    page.goto(f"/runs/{run_id}/steps/{STEPS - 1}")
    expect(page.locator("#step-stats")).to_contain_text("1 episodes")
    expect(page.locator("#step-prev")).to_be_visible()
    expect(page.locator("#step-next")).to_be_hidden()  # the records of no step are no step
    assert page.steps_asked and all(_bounded(q) for q in page.steps_asked), page.steps_asked
