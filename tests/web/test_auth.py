"""The dashboard on a server that requires API keys: it asks for one and sends it."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import expect

from openruns.cli import main as openruns_main
from openruns.server import ServerHandle, serve_in_thread


@pytest.fixture
def auth_server(tmp_path, capsys) -> Iterator[tuple[ServerHandle, str]]:
    data = tmp_path / "auth-data"
    assert openruns_main(["keys", "create", "--team", "red", "--data-dir", str(data)]) == 0
    key = capsys.readouterr().out.strip()
    handle = serve_in_thread(data, auth=True)
    yield handle, key
    handle.stop()


def test_the_dashboard_asks_for_a_key_and_uses_it(context, auth_server):
    server, key = auth_server
    headers = {"Authorization": f"Bearer {key}"}
    body = {"kind": "eval", "name": "team-red-run", "config": {"format": "toml", "text": "a = 1"}}
    run = httpx.post(f"{server.url}/api/v1/runs", json=body, headers=headers).json()

    # Its own page: the 401s before the key is given are the point of this test.
    page = context.new_page()
    try:
        page.goto(f"{server.url}/")
        expect(page.locator("#auth")).to_be_visible()
        page.fill("#auth-key", key)
        page.click("#auth-form button")
        expect(page.locator("#runs tbody tr")).to_have_count(1)
        expect(page.locator("#runs tbody tr")).to_contain_text("team-red-run")
        expect(page.locator("#auth")).to_be_hidden()
        expect(page.locator("#forget-key")).to_be_visible()

        # The highlighted config and the exports go through the key too.
        page.goto(f"{server.url}/runs/{run['id']}")
        expect(page.locator("#config-body .hl")).to_contain_text("a = 1")
        with page.expect_download() as download:
            page.click("#export-links a >> text=metrics.ndjson")
        assert download.value.suggested_filename == f"{run['id']}-metrics.ndjson"

        # Writes (a tag, from the run page) carry the key too.
        page.fill("#tag-input", "checked")
        page.press("#tag-input", "Enter")
        expect(page.locator("#tag-list li")).to_have_count(1)
        stored = httpx.get(f"{server.url}/api/v1/runs/{run['id']}", headers=headers).json()
        assert stored["tags"] == ["checked"]

        page.click("#forget-key")
        expect(page.locator("#auth")).to_be_visible()
    finally:
        page.close()
