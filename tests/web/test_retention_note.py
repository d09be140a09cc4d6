"""The run page's line on retention (issue 22): a run the server's pass reduced says how many
episodes were dropped, when, and how many per step were kept; a run not reduced says nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import orjson
import pytest
from playwright.sync_api import expect

from openruns.server import serve_in_thread
from openruns.server.retention_policy import RetentionRule

from .. import patience
from ..browser import own_page


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator:
    """A server of this module's own whose retention pass runs every 0.2 s and reduces any run
    ended a tenth of a second ago to 2 episodes per step."""
    handle = serve_in_thread(
        tmp_path_factory.mktemp("retention-data"),
        retention=(RetentionRule(1e-6, 2),),
        retention_interval=0.2,
    )
    yield handle
    handle.stop()


def _run(http: httpx.Client, finish: bool) -> str:
    rid = http.post("/runs", json={"kind": "train"}).json()["id"]
    records = [
        {"id": f"ep-{s}-{i}", "run": {"work": {"step": s}}, "traces": [{"reward": i / 10}]}
        for s in range(3)
        for i in range(10)
    ]
    body = b"".join(orjson.dumps(r) + b"\n" for r in records)
    headers = {"Content-Type": "application/x-ndjson", "Idempotency-Key": f"e-{rid}"}
    assert http.post(f"/runs/{rid}/episodes", content=body, headers=headers).is_success
    if finish:
        assert http.post(f"/runs/{rid}/finish", json={"status": "completed"}).is_success
    return rid


def test_the_run_page_says_what_retention_dropped(browser, server):
    with httpx.Client(base_url=server.url + "/api/v1", timeout=30) as http:
        reduced = _run(http, finish=True)
        running = _run(http, finish=False)
        deadline = time.monotonic() + patience.START
        while not http.get(f"/runs/{reduced}/retention").json()["reduced"]:
            assert time.monotonic() < deadline, "the server's pass did not reduce the run"
            time.sleep(0.2)
        day = datetime.fromtimestamp(
            http.get(f"/runs/{reduced}/retention").json()["reduced_at"], UTC
        ).strftime("%Y-%m-%d")

        with own_page(browser, server.url) as page:
            page.goto(f"/runs/{reduced}")
            note = page.locator("#retention-note")
            expect(note).to_have_text(
                f"24 episodes dropped by retention on {day} (kept 2 per step)"
            )
            page.goto(f"/runs/{running}")
            expect(page.locator("#run-header h1")).to_be_visible()
            expect(page.locator("#retention-note")).to_have_count(0)
