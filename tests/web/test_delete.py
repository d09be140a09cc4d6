"""The run page's Delete button (issue 22): nothing happens without the confirmation; with
it the run and its data are gone and the browser is on the runs page."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import orjson
import pytest
from playwright.sync_api import expect

from openruns.server import serve_in_thread

from ..browser import own_page


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator:
    """A server of this module's own: the seeded one keeps exactly its runs."""
    handle = serve_in_thread(tmp_path_factory.mktemp("delete-data"))
    yield handle
    handle.stop()


def test_the_delete_button_asks_then_deletes_the_run(browser, server):
    with httpx.Client(base_url=server.url + "/api/v1", timeout=30) as http:
        rid = http.post("/runs", json={"kind": "train", "name": "doomed"}).json()["id"]
        rows = [{"step": s, "ts": 1.0e9 + s, "values": {"loss": 1.0 / (s + 1)}} for s in range(5)]
        body = b"".join(orjson.dumps(r) + b"\n" for r in rows)
        headers = {"Content-Type": "application/x-ndjson", "Idempotency-Key": "m1"}
        assert http.post(f"/runs/{rid}/metrics", content=body, headers=headers).is_success
        assert http.post(f"/runs/{rid}/finish", json={"status": "completed"}).is_success

        with own_page(browser, server.url) as page:
            page.goto(f"/runs/{rid}")
            button = page.locator("#delete-run")
            expect(button).to_be_visible()

            asked: list[str] = []

            def dismiss(dialog) -> None:
                asked.append(dialog.message)
                dialog.dismiss()

            page.once("dialog", dismiss)
            button.click()
            expect(button).to_be_enabled()
            assert asked and rid in asked[0] and "cannot be undone" in asked[0]
            assert http.get(f"/runs/{rid}").status_code == 200  # declined: kept

            page.once("dialog", lambda dialog: dialog.accept())
            button.click()
            page.wait_for_url(f"**/?deleted={rid}")
            expect(page.locator("#filters")).to_be_visible()
            assert http.get(f"/runs/{rid}").status_code == 404
            assert http.get(f"/runs/{rid}/metrics/keys").status_code == 404
            assert rid not in [r["id"] for r in http.get("/runs").json()["items"]]
