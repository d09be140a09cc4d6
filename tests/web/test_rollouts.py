"""Reading rollouts in a real browser: every chat shape, step previews and histogram, previous
and next episode by keys, two records side by side, and search with highlighted matches."""

from __future__ import annotations

import re
import statistics
import time

from playwright.sync_api import expect

from .. import patience
from .seed import EPISODES_PER_STEP, OPENAI_CHAT, PLAIN_STRINGS, PROMPT_LISTS, UNKNOWN_SHAPE


def roles(page) -> list[str]:
    return page.locator("article.message").evaluate_all("(els) => els.map((e) => e.dataset.role)")


def open_record(page, run: str, record_id: str) -> None:
    page.goto(f"/runs/{run}/episodes/{record_id}")
    expect(page.locator("#episode-header h1")).to_contain_text(record_id)


def test_openai_messages_are_a_chat_with_tool_calls_and_results_linked(page, seeded):
    open_record(page, seeded.eval, OPENAI_CHAT["id"])
    expect(page.locator("#episode-header h1")).to_contain_text("Chat")
    assert roles(page) == ["system", "user", "assistant", "tool", "assistant"]
    call = page.locator(".tool-call")
    expect(call).to_contain_text("get_weather")
    expect(call).to_contain_text('"city": "Lyon"')  # arguments pretty-printed
    # The call links down to its result, the result back up to its call.
    to_result = call.locator("a.to-result")
    result = page.locator(f"#{to_result.get_attribute('href')[1:]}")
    expect(result).to_have_attribute("data-role", "tool")
    expect(result).to_contain_text("light rain, 12 C")
    back = result.locator("a.to-call")
    expect(back).to_contain_text("result of get_weather call_w1")
    assert page.locator(back.get_attribute("href")).count() == 1
    to_result.click()
    assert page.evaluate("location.hash") == to_result.get_attribute("href")
    expect(page.locator(".trace dl.facts")).to_contain_text("0.5")  # the record's reward


def test_prompt_and_completion_lists_are_one_chat(page, seeded):
    open_record(page, seeded.eval, PROMPT_LISTS["id"])
    assert roles(page) == ["system", "user", "assistant"]
    messages = page.locator("article.message")
    expect(messages.nth(2)).to_contain_text("the answer is 9")
    expect(messages.nth(2).locator(".badge.sampled")).to_have_count(1)  # the completion
    expect(messages.nth(1).locator(".badge.sampled")).to_have_count(0)
    expect(page.locator(".trace dl.facts")).to_contain_text("Expected answer")
    # Fields that are not the chat stay readable, as a tree.
    rest = page.locator("details.rest")
    rest.locator("summary").first.click()
    info = rest.locator("li", has_text="info").locator(":scope > details.tree")
    info.locator(":scope > summary").click()
    expect(info).to_contain_text('source: "trl"')


def test_plain_strings_are_a_user_and_an_assistant_message(page, seeded):
    open_record(page, seeded.eval, PLAIN_STRINGS["id"])
    assert roles(page) == ["user", "assistant"]
    expect(page.locator("article.message").nth(0)).to_contain_text("Translate 'chat' to English.")
    expect(page.locator("article.message").nth(1)).to_contain_text("cat")
    expect(page.locator(".trace dl.facts")).to_contain_text("cat (the animal)")


def test_a_record_of_no_known_shape_is_a_collapsible_tree(page, seeded):
    open_record(page, seeded.eval, UNKNOWN_SHAPE["id"])
    expect(page.locator("#episode-header h1")).to_contain_text("Record")
    expect(page.locator("article.message")).to_have_count(0)
    tree = page.locator("#traces .trace.unknown > details.tree")
    expect(tree).to_have_attribute("open", "")
    observation = tree.locator(":scope > ul > li", has_text="observation")
    nested = observation.locator(":scope > details.tree")
    expect(nested).not_to_have_attribute("open", "")  # built only when opened
    expect(nested.locator("li")).to_have_count(0)
    nested.locator(":scope > summary").click()
    expect(nested).to_contain_text("legal_moves")
    expect(tree).to_contain_text('"b2"')


def test_step_rows_preview_the_prompt_and_the_final_answer(page, seeded, screenshot):
    page.goto(f"/runs/{seeded.train}/steps/2?sort=step")
    rows = page.locator("#episodes tbody tr")
    expect(rows).to_have_count(EPISODES_PER_STEP)
    expect(page.locator("#episodes tbody")).to_have_attribute("data-previews", "loaded")
    for i, episode in enumerate(seeded.episodes[2]):
        nodes = episode["traces"][0]["nodes"]
        expect(rows.nth(i).locator("td.prompt")).to_have_text(nodes[1]["message"]["content"])
        answer = " ".join(nodes[-1]["message"]["content"].split())
        expect(rows.nth(i).locator("td.reply")).to_contain_text(answer)
        expected = episode["task"]["data"]["answer"]
        expect(rows.nth(i).locator("td.answer")).to_have_text(expected)
    # The histogram holds every reward of the step.
    histogram = page.locator("#histogram")
    expect(histogram).to_have_attribute("data-count", str(EPISODES_PER_STEP))
    drawn = page.eval_on_selector("#histogram .plot", "(gd) => gd.data[0].x")
    assert drawn == sorted(seeded.rewards[2])
    caption = page.locator("#histogram-caption")
    expect(caption).to_contain_text(f"{EPISODES_PER_STEP} rewards")
    expect(caption).to_contain_text(f"median {round(statistics.median(seeded.rewards[2]), 4):g}")
    screenshot(page, "step")


def test_previous_and_next_episode_by_link_and_key_in_the_step_order(page, seeded):
    page.goto(f"/runs/{seeded.train}/steps/3")  # highest reward first
    rows = page.locator("#episodes tbody tr")
    expect(rows).to_have_count(EPISODES_PER_STEP)
    order = rows.evaluate_all("(rows) => rows.map((r) => r.dataset.id)")
    rows.nth(0).focus()
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(rf".*/episodes/{order[0]}$"))
    expect(page.locator("#position")).to_have_text(f"1 of {EPISODES_PER_STEP} at this step")
    expect(page.locator("#prev-episode")).to_be_hidden()
    page.keyboard.press("j")
    page.wait_for_url(re.compile(rf".*/episodes/{order[1]}$"))
    expect(page.locator("#position")).to_have_text(f"2 of {EPISODES_PER_STEP} at this step")
    page.keyboard.press("ArrowRight")
    page.wait_for_url(re.compile(rf".*/episodes/{order[2]}$"))
    expect(page.locator("#prev-episode")).to_be_visible()
    page.keyboard.press("k")
    page.wait_for_url(re.compile(rf".*/episodes/{order[1]}$"))
    page.click("#next-episode")
    page.wait_for_url(re.compile(rf".*/episodes/{order[2]}$"))
    # The step page's filters go along: with env=math only math episodes are neighbours.
    page.goto(f"/runs/{seeded.train}/steps/3?env=math")
    expect(rows).to_have_count(EPISODES_PER_STEP // 2)
    rows.nth(0).click()
    expect(page.locator("#position")).to_have_text(f"1 of {EPISODES_PER_STEP // 2} at this step")


def test_the_rows_stay_put_while_the_step_page_fills_in(page, seeded):
    """The previews and the histogram (its caption) come after the rows: the rows must not
    move then, or a click aimed at a row's checkbox lands beside it and opens the episode (a
    14 px shift, when the caption's line appeared, made test_two_rows_of_a_step_side_by_side
    flaky)."""
    page.goto(f"/runs/{seeded.train}/steps/1?sort=step")
    rows = page.locator("#episodes tbody tr")
    expect(rows).to_have_count(EPISODES_PER_STEP)
    box = rows.nth(0).locator("input[type=checkbox]")
    before = box.bounding_box()
    expect(page.locator("#episodes tbody")).to_have_attribute("data-previews", "loaded")
    expect(page.locator("#histogram")).to_have_attribute("data-count", str(EPISODES_PER_STEP))
    expect(page.locator("#histogram-caption")).not_to_be_empty()
    assert box.bounding_box() == before


def test_two_rows_of_a_step_side_by_side(page, seeded, screenshot):
    page.goto(f"/runs/{seeded.train}/steps/1?sort=step")
    rows = page.locator("#episodes tbody tr")
    expect(rows).to_have_count(EPISODES_PER_STEP)
    button = page.locator("#pair-selected")
    rows.nth(0).locator("input[type=checkbox]").check()
    expect(button).to_be_disabled()
    rows.nth(1).locator("input[type=checkbox]").check()
    expect(button).to_be_enabled()
    button.click()
    page.wait_for_url("**/compare/episodes?*")
    first, second = (e["id"] for e in seeded.episodes[1][:2])
    expect(page.locator("#side-a .crumbs")).to_contain_text(first)
    expect(page.locator("#side-b .crumbs")).to_contain_text(second)
    for side in ("#side-a", "#side-b"):
        expect(page.locator(f"{side} article.message")).to_have_count(5)
    # Anchors stay apart: each side's tool call links to its own result.
    links = page.locator(".tool-call a.to-result").evaluate_all("(as) => as.map((a) => a.hash)")
    assert len(links) == 2 and links[0] != links[1]
    screenshot(page, "pair", full_page=True)


def test_an_episode_pinned_in_one_run_beside_a_record_of_another(fresh_page, seeded):
    page = fresh_page
    first = seeded.episodes[0][0]["id"]
    open_record(page, seeded.train, first)
    page.click("#pin")
    expect(page.locator("#pin")).to_have_text("Unpin")
    open_record(page, seeded.eval, OPENAI_CHAT["id"])
    pair = page.locator("#pair-link")
    expect(pair).to_contain_text("web-train")
    pair.click()
    page.wait_for_url("**/compare/episodes?*")
    expect(page.locator("#side-a .crumbs")).to_contain_text("web-train")
    expect(page.locator("#side-b .crumbs")).to_contain_text("web-eval")
    expect(page.locator("#side-b article.message")).to_have_count(5)


def wait_searchable(page, run: str) -> None:
    """The index is built behind ingest: wait until the run has no record left to index."""
    deadline = time.monotonic() + patience.SETTLE
    while time.monotonic() < deadline:
        body = page.request.get(f"/api/v1/runs/{run}/search?q=x").json()
        if body["pending"] == 0:
            return
        time.sleep(0.2)
    raise AssertionError("the search index did not catch up")


def test_search_finds_and_marks_matches_and_filters(page, seeded, screenshot):
    wait_searchable(page, seeded.train)
    page.goto(f"/runs/{seeded.train}")
    page.fill("#search-q", '"sandbox timed out"')
    page.press("#search-q", "Enter")
    page.wait_for_url(re.compile(r".*/search\?q=.*"))
    hits = page.locator("#hits li.hit")
    expect(hits).to_have_count(1)
    expect(hits.nth(0)).to_have_attribute("data-id", seeded.long_episode)
    marks = hits.nth(0).locator("mark").all_inner_texts()
    assert marks and all(m.lower() == "sandbox timed out" for m in marks)
    expect(hits.nth(0).locator(".snippet .badge").first).to_have_text("error")
    screenshot(page, "search")
    # A word in every episode, narrowed by the filters; the URL keeps them.
    page.fill("#q", "calculator")
    page.fill("#f-step-min", "1")
    page.fill("#f-step-max", "2")
    page.select_option("#f-env", "math")
    page.click("#search button[type=submit]")
    expected = [
        e["id"]
        for step in (2, 1)
        for e in reversed(seeded.episodes[step])
        if e["env"]["id"] == "math"
    ]
    expect(hits).to_have_count(len(expected))
    assert hits.evaluate_all("(els) => els.map((e) => e.dataset.id)") == expected
    assert "env=math" in page.url and "step_min=1" in page.url
    page.reload()
    expect(hits).to_have_count(len(expected))
    # A hit opens its episode.
    hits.nth(0).locator("a").first.click()
    page.wait_for_url(f"**/episodes/{expected[0]}")
    # Nothing found says so.
    page.goto(f"/runs/{seeded.train}/search?q=zzzyzzy")
    expect(page.locator("#search-stats")).to_contain_text("nothing matches")
