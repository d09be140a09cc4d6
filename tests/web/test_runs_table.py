"""The runs table's columns and grouping (kept in the browser), and the notes, tags and group a
reader edits on the run page (on a server of its own: these tests change runs)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

import openruns
from openruns.server import ServerHandle, serve_in_thread

from .seed import GROUP


def headers(page) -> list[str]:
    return page.locator("#runs-head th").all_inner_texts()


def test_chosen_columns_are_kept_across_visits(fresh_page, seeded):
    page = fresh_page
    page.goto("/")
    rows = page.locator("#runs tbody tr")
    expect(rows).to_have_count(3)
    # Automatic: three metric columns, once the runs' latest metric values have arrived (the
    # summary's keys alone would choose final/reward; a choice made before then keeps those).
    automatic = ["Select", "Status", "Kind", "Name", "Model", "Started", "Duration"]
    automatic += ["avg_reward", "train/loss", "final/loss"]
    expect(page.locator("#runs-head th")).to_have_text(automatic)
    page.click("#columns summary")
    page.check('#columns-fixed input[value="Group"]')
    page.uncheck('#columns-fixed input[value="Model"]')
    page.uncheck('#columns-metrics input[value="final/loss"]')
    page.check('#columns-metrics input[value="train/grad_norm"]')
    expected = ["Select", "Status", "Kind", "Name", "Group", "Started", "Duration"]
    expected += ["avg_reward", "train/loss", "train/grad_norm"]
    expect(page.locator("#runs-head th")).to_have_text(expected)
    page.reload()
    expect(rows).to_have_count(3)
    expect(page.locator("#runs-head th")).to_have_text(expected)
    train = page.locator(f'#runs tbody tr[data-run-id="{seeded.train}"]')
    expect(train.locator("td").nth(4)).to_have_text(GROUP)
    expect(train.locator("td").nth(9)).not_to_have_text("—")  # its last grad_norm
    # Back to the automatic metric columns.
    page.click("#columns summary")
    page.click("#columns-auto")
    expect(page.locator("#runs-head th").nth(9)).to_have_text("final/loss")


def test_rows_grouped_by_the_runs_group(fresh_page, seeded):
    page = fresh_page
    page.goto("/")
    expect(page.locator("#runs tbody tr[data-run-id]")).to_have_count(3)
    page.select_option("#group-by", "group")
    groups = page.locator("#runs tbody tr.group-row")
    expect(groups).to_have_count(2)
    # In the order of each group's newest run: web-failed has no group.
    expect(groups.nth(0)).to_contain_text("group: (none) · 1 run")
    expect(groups.nth(1)).to_contain_text(f"group: {GROUP} · 2 runs")
    order = page.locator("#runs tbody tr").evaluate_all(
        "(rows) => rows.map((r) => r.dataset.runId || 'header')"
    )
    assert order == ["header", seeded.failed, "header", seeded.eval, seeded.train]
    # Keyboard moves skip the group headers.
    page.locator(f'#runs tbody tr[data-run-id="{seeded.failed}"]').focus()
    page.keyboard.press("ArrowDown")
    focused = page.evaluate("document.activeElement.dataset.runId")
    assert focused == seeded.eval
    page.reload()
    expect(page.locator("#group-by")).to_have_value("group")
    expect(groups).to_have_count(2)
    # The group filter, as the run page links it.
    page.goto(f"/?group={GROUP}")
    expect(page.locator("#runs tbody tr[data-run-id]")).to_have_count(2)


@pytest.fixture
def own_server(tmp_path) -> Iterator[ServerHandle]:
    handle = serve_in_thread(tmp_path / "data")
    yield handle
    handle.stop()


def test_notes_tags_and_group_are_edited_on_the_run_page(page, own_server, tmp_path):
    run = openruns.init(
        kind="eval", name="notes-run", tags=["first"], base_url=own_server.url, dir=tmp_path
    )
    run.finish()
    page.goto(f"{own_server.url}/runs/{run.id}")
    tags = page.locator("#tag-list li")
    expect(tags).to_have_count(1)
    page.fill("#tag-input", "needs-rerun")
    page.press("#tag-input", "Enter")
    expect(tags).to_have_count(2)
    expect(page.locator("#run-header")).to_contain_text("needs-rerun")
    tags.filter(has_text="first").locator("button").click()
    expect(tags).to_have_count(1)
    page.fill("#notes-text", "reward hacking after step 40?\nsee the judge traces")
    page.fill("#group-input", "ablation-b")
    page.click("#notes-form button[type=submit]")
    expect(page.locator("#notes-status")).to_have_text("saved")
    stored = page.request.get(f"{own_server.url}/api/v1/runs/{run.id}").json()
    assert stored["tags"] == ["needs-rerun"]
    assert stored["notes"] == "reward hacking after step 40?\nsee the judge traces"
    assert stored["group"] == "ablation-b"
    page.reload()
    expect(page.locator("#notes-text")).to_have_value(stored["notes"])
    expect(page.locator("#group-input")).to_have_value("ablation-b")
    expect(page.locator("#run-header")).to_contain_text("ablation-b")
    # Cleared notes are stored as none.
    page.fill("#notes-text", "")
    page.click("#notes-form button[type=submit]")
    expect(page.locator("#notes-status")).to_have_text("saved")
    assert page.request.get(f"{own_server.url}/api/v1/runs/{run.id}").json()["notes"] is None
