"""
A run logged by the unmodified W&B SDK, read in a real browser: the rows of its rollout table
are ordinary episodes (the step browser, the episode page, with the prompt's picture), and its
other table and its history picture are on the run page, at the step the reader picks.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import expect

from tests.wandb.helpers import run_file

SCRIPT = Path(__file__).with_name("wandb_media_run.py")


@pytest.fixture(scope="module")
def wandb_run(server, tmp_path_factory) -> str:
    name = f"web-wandb-{uuid.uuid4().hex[:6]}"
    run_file(SCRIPT, tmp_path_factory.mktemp("wandb-media"), server.url, RUN_NAME=name)
    runs = httpx.get(f"{server.url}/api/v1/runs", params={"name": name}, timeout=30).json()
    (run,) = [r for r in runs["items"] if r["name"] == name]
    return run["id"]


def loaded(image) -> int:
    """The natural width of an <img> once it has loaded (scrolled to: images load lazily);
    a picture that does not load times out."""
    image.scroll_into_view_if_needed()
    image.page.wait_for_function(
        "(img) => img.complete && img.naturalWidth > 0", arg=image.element_handle()
    )
    return image.evaluate("(img) => img.naturalWidth")


def test_rollout_rows_are_episodes_with_the_prompts_picture(page, wandb_run):
    page.goto(f"/runs/{wandb_run}/steps/2")
    rows = page.locator("#episodes tbody tr")
    expect(rows).to_have_count(2)
    expect(page.locator("#episodes tbody")).to_have_attribute("data-previews", "loaded")
    pictured = rows.filter(has_text="Describe picture 2")
    expect(pictured.locator("td.reply")).to_have_text("a coloured square")
    expect(page.locator("#histogram")).to_have_attribute("data-count", "2")
    pictured.locator("a").first.click()
    figure = page.locator("article.message figure.part.image")
    expect(figure).to_have_count(1)
    expect(figure.locator("figcaption")).to_have_text("picture 2")
    assert loaded(figure.locator("img")) == 16
    expect(page.locator("article.message").first).to_contain_text("Describe picture 2")


def test_other_tables_and_history_images_on_the_run_page(page, wandb_run, screenshot):
    page.goto(f"/runs/{wandb_run}")
    section = page.locator("#media")
    expect(section).to_be_visible()
    expect(page.locator("#toc-media")).to_be_visible()
    confusion = section.locator('.media-card[data-key="eval/confusion"]')
    expect(confusion.locator("table.wb-table thead")).to_contain_text("recall")
    expect(confusion.locator("table.wb-table tbody tr")).to_have_count(2)
    expect(confusion.locator("tbody tr").first).to_contain_text("0.82")  # the latest step
    confusion.locator("select").select_option(label="1")
    expect(confusion.locator("tbody tr").first).to_contain_text("0.81")
    picture = section.locator('.media-card[data-key="samples/pic"]')
    expect(picture.locator("figcaption")).to_have_text("step 2")
    assert loaded(picture.locator("img")) == 16
    # The rollout table is drawn too, and says where its episodes are.
    completions = section.locator('.media-card[data-key="completions"]')
    link = completions.locator(".media-note a")
    expect(link).to_have_attribute("href", f"/runs/{wandb_run}/steps/2")
    assert loaded(completions.locator("img").first) == 16
    section.scroll_into_view_if_needed()
    screenshot(page, "run-media")
