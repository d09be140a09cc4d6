"""The runs page's filter box (issue 22): the expression and sort live in the URL, so a view
can be shared; a bad expression shows the server's message under the box."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

from playwright.sync_api import expect

from ..browser import PAGE_MS, VIEWPORT, watch


def test_filter_and_sort_in_the_url(browser, server, seeded):
    context = browser.new_context(viewport=VIEWPORT, base_url=server.url)
    context.set_default_timeout(PAGE_MS)
    page = context.new_page()
    problems = watch(page)
    rows = page.locator("#runs tbody tr[data-run-id]")
    try:
        # A shared link: the view it names.
        page.goto("/?filter=config.optimizer.lr+%3C+1e-5")
        expect(page.locator("#f-filter")).to_have_value("config.optimizer.lr < 1e-5")
        expect(rows).to_have_count(1)
        expect(rows.first).to_have_attribute("data-run-id", seeded.train)

        # Typed in: applied on Enter, and written to the URL.
        page.fill("#f-filter", "metric:train/loss > 0")
        page.fill("#f-sort", "-metric:train/loss")
        page.press("#f-sort", "Enter")
        page.press("#f-filter", "Enter")
        expect(rows).to_have_count(3)
        expect(rows.first).to_have_attribute("data-run-id", seeded.failed)  # its loss: 3.0
        query = parse_qs(urlparse(page.url).query)
        assert query["filter"] == ["metric:train/loss > 0"]
        assert query["sort"] == ["-metric:train/loss"]
        order = rows.evaluate_all("(rows) => rows.map((r) => r.dataset.runId)")
        page.reload()
        expect(rows).to_have_count(3)
        assert rows.evaluate_all("(rows) => rows.map((r) => r.dataset.runId)") == order

        # A bad expression: the server's message under the box, no rows.
        page.fill("#f-filter", "config.lr <")
        page.press("#f-filter", "Enter")
        expect(page.locator("#filter-error")).to_contain_text("position 12, found the end")
        expect(page.locator("#filter-error")).to_be_visible()
        expect(rows).to_have_count(0)
        expect(page.locator("#f-filter")).to_have_attribute("aria-invalid", "")
        page.fill("#f-filter", "status = failed")
        page.press("#f-filter", "Enter")
        expect(rows).to_have_count(1)
        expect(page.locator("#filter-error")).to_be_hidden()
    finally:
        context.close()
    # Chromium logs each 400 answer as a console error: those are the expected ones.
    unexpected = [p for p in problems if "status of 400" not in p]
    assert not unexpected, "\n".join(unexpected)
