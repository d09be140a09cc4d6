"""
The dashboard on a server that requires API keys, in Chromium: signing in once holds an
HttpOnly session cookie (never the key, in storage, a URL or the page), every page and download
shows the team's runs only, writes go through, episode ids with "/" open, sign-out ends it,
and no page breaks its Content-Security-Policy.
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote, urlencode

import httpx
import orjson
import pytest
from playwright.sync_api import expect

from openruns.cli import main as openruns_main
from openruns.rundir import batch_key
from openruns.server import ServerHandle, serve_in_thread

from ..browser import PAGE_MS, VIEWPORT
from ..patience import REQUEST

# Reports every Content-Security-Policy violation a page meets (Chromium also logs them).
WATCH_CSP = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => window.__cspViolations.push(
  `${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`));
"""


@pytest.fixture
def auth_server(tmp_path, capsys) -> Iterator[tuple[ServerHandle, dict[str, str]]]:
    data = tmp_path / "auth-data"
    keys = {}
    for team in ("red", "blue"):
        assert openruns_main(["keys", "create", "--team", team, "--data-dir", str(data)]) == 0
        keys[team] = capsys.readouterr().out.strip()
    handle = serve_in_thread(data, auth=True)
    yield handle, keys
    handle.stop()


def _seed(url: str, key: str, name: str) -> str:
    headers = {"Authorization": f"Bearer {key}"}
    body = {"kind": "train", "name": name, "config": {"format": "toml", "text": "a = 1"}}
    run = httpx.post(f"{url}/api/v1/runs", json=body, headers=headers, timeout=REQUEST).json()["id"]
    records = [
        {
            "id": episode_id,
            "run": {"work": {"step": 3}},
            "traces": [
                {
                    "reward": 1.0,
                    "prompt": [{"role": "user", "content": f"question of {episode_id}"}],
                    "completion": [{"role": "assistant", "content": "42"}],
                }
            ],
        }
        for episode_id in ("gsm8k/12", "plain-1")
    ]
    data = b"".join(orjson.dumps(r) + b"\n" for r in records)
    upload = httpx.post(
        f"{url}/api/v1/runs/{run}/episodes",
        content=data,
        headers={**headers, "Idempotency-Key": batch_key(data)},
        timeout=REQUEST,
    )
    assert upload.status_code == 200, upload.text
    return run


def test_signing_in_holds_a_session_never_the_key(browser, auth_server):
    server, keys = auth_server
    red_run = _seed(server.url, keys["red"], "team-red-run")
    blue_run = _seed(server.url, keys["blue"], "team-blue-run")
    context = browser.new_context(viewport=VIEWPORT, base_url=server.url)
    context.set_default_timeout(PAGE_MS)
    context.add_init_script(WATCH_CSP)
    urls: list[str] = []
    page_errors: list[str] = []
    context.on("request", lambda request: urls.append(request.url))
    page = context.new_page()
    page.on("pageerror", lambda error: page_errors.append(str(error)))
    try:
        page.goto("/")
        expect(page).to_have_url(f"{server.url}/signin?next=%2F")
        page.fill("#signin-key", "ork_not-a-key")
        page.click("#signin-form button")
        expect(page.locator("#signin-error")).to_contain_text("not a valid API key")
        page.fill("#signin-key", keys["red"])
        page.click("#signin-form button")
        expect(page).to_have_url(f"{server.url}/")
        expect(page.locator("#runs tbody tr")).to_have_count(1)
        expect(page.locator("#runs tbody tr")).to_contain_text("team-red-run")
        expect(page.locator("#session")).to_contain_text("team red")

        # The browser holds an HttpOnly, SameSite=Strict cookie; the page cannot read it, and
        # the key is nowhere the page could reach.
        (cookie,) = context.cookies()
        assert cookie["name"] == "openruns_session" and cookie["httpOnly"]
        assert cookie["sameSite"] == "Strict" and not cookie["secure"]  # plain HTTP here
        assert keys["red"] not in cookie["value"]
        assert "openruns_session" not in page.evaluate("document.cookie")
        stored = page.evaluate("JSON.stringify([{...localStorage}, {...sessionStorage}])")
        assert keys["red"] not in stored and "ork_" not in stored

        # The run page: config, a download and a write, all through the session.
        page.goto(f"/runs/{red_run}")
        expect(page.locator("#config-body .hl")).to_contain_text("a = 1")
        with page.expect_download() as download:
            page.click("#export-links a >> text=metrics.ndjson")
        assert download.value.suggested_filename == f"{red_run}-metrics.ndjson"
        page.fill("#tag-input", "checked")
        page.press("#tag-input", "Enter")
        expect(page.locator("#tag-list li")).to_have_count(1)
        stored_run = httpx.get(
            f"{server.url}/api/v1/runs/{red_run}",
            headers={"Authorization": f"Bearer {keys['red']}"},
            timeout=REQUEST,
        ).json()
        assert stored_run["tags"] == ["checked"]

        # An episode whose id holds "/" opens from its link, and from the plain path too.
        page.goto(f"/runs/{red_run}/episodes/{quote('gsm8k/12', safe='')}")  # as links have it
        expect(page.locator("#episode-header")).to_contain_text("gsm8k/12")
        expect(page.locator("#traces h2")).to_contain_text("Trace")
        page.goto(f"/runs/{red_run}/episodes/gsm8k/12")  # typed by hand
        expect(page.locator("#episode-header")).to_contain_text("gsm8k/12")

        # Another team's run is not there, on a page or as a download.
        page.goto(f"/runs/{blue_run}")
        expect(page.locator(".missing h1")).to_have_text(f"No run {blue_run}")
        export = page.request.get(f"/api/v1/runs/{blue_run}/export/episodes.ndjson")
        assert export.status == 404

        page.goto("/")
        page.click("#sign-out")
        expect(page).to_have_url(f"{server.url}/signin")
        assert context.cookies() == []
        page.goto(f"/runs/{red_run}")
        expect(page).to_have_url(f"{server.url}/signin?next=%2Fruns%2F{red_run}")
        violations = page.evaluate("window.__cspViolations")
    finally:
        context.close()
    assert violations == [] and page_errors == []
    assert not [u for u in urls if keys["red"] in u or keys["blue"] in u]


def test_every_page_keeps_its_content_security_policy(page, seeded):
    """Every page of the dashboard (auth off), charts drawn: no violation, and the headers."""
    page.add_init_script(WATCH_CSP)
    step = min(seeded.episodes)
    episode = seeded.episodes[step][0]["id"]
    pages = {
        "/": "#runs tbody tr",
        f"/runs/{seeded.train}": 'figure.chart[data-drawn="true"]',
        f"/runs/{seeded.train}/steps/{step}": "#episodes tbody tr",
        f"/runs/{seeded.train}/episodes/{quote(episode, safe='')}": "#traces section",
        f"/runs/{seeded.train}/search?q=the": "main",
        f"/compare?runs={seeded.train},{seeded.eval}": 'figure.chart[data-drawn="true"]',
        "/compare/episodes?"
        + urlencode({"run_a": seeded.train, "a": episode, "run_b": seeded.train, "b": episode}): (
            "main section"
        ),
        "/signin": "#signin-done",
    }
    for path, ready in pages.items():
        response = page.goto(path)
        assert response is not None and response.ok, path
        headers = response.headers
        csp = headers["content-security-policy"]
        assert "script-src 'self';" in csp and "frame-ancestors 'none'" in csp, path
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["x-frame-options"] == "DENY" and headers["referrer-policy"]
        expect(page.locator(ready).first).to_be_visible()
        assert page.evaluate("window.__cspViolations") == [], path
    # uPlot's and Plotly's styles arrived as stylesheets, not inline: their layers are
    # positioned (the run page's charts, the step page's histogram).
    page.goto(f"/runs/{seeded.train}")
    expect(page.locator('figure.chart[data-drawn="true"]').first).to_be_visible()
    position = page.eval_on_selector(".uplot .u-over", "(el) => getComputedStyle(el).position")
    assert position == "absolute"
    page.goto(f"/runs/{seeded.train}/steps/{step}")
    expect(page.locator("#histogram[data-count]")).to_be_attached()
    position = page.eval_on_selector(
        "#histogram .js-plotly-plot .main-svg", "(el) => getComputedStyle(el).position"
    )
    assert position == "absolute"
    assert page.evaluate("window.__cspViolations") == []
