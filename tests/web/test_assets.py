"""What the server sends the browser, read over HTTP: air-gapped assets, caching, the config."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import httpx
import pytest

from openruns.server.web.assets import (
    PLOTLY_FILE,
    PLOTLY_URL,
    UPLOT_CSS_FILE,
    UPLOT_CSS_URL,
    UPLOT_JS_FILE,
    UPLOT_JS_URL,
)
from openruns.server.web.highlight import render_config

from ..patience import REQUEST
from .seed import CONFIG_TOML

PAGES = ("/", "/runs/x", "/runs/x/steps/3", "/runs/x/episodes/e", "/compare?runs=a,b")
STATIC = Path(__file__).resolve().parents[2] / "src" / "openruns" / "server" / "web"


@pytest.fixture
def http(server):
    with httpx.Client(base_url=server.url, timeout=REQUEST) as client:
        yield client


@pytest.mark.parametrize("path", PAGES)
def test_pages_load_only_same_origin_assets(http, path):
    response = http.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    urls = re.findall(r'(?:src|href)="([^"]+)"', response.text)
    assert urls and all(u.startswith(("/", "#", "data:")) for u in urls), urls
    for url in urls:
        if url.startswith("/static/"):
            assert http.get(url).status_code == 200, url


def test_no_third_party_code_or_remote_urls_in_our_files():
    # Third-party files live in static/vendor/ (VENDOR.md), not among ours.
    for path in [*STATIC.glob("static/*.*"), *STATIC.glob("templates/*")]:
        text = path.read_text()
        assert not re.search(r"https?://", text), f"{path.name} names a remote URL"
        assert len(text) < 40_000, f"{path.name}: our own files stay small"


def test_plotly_is_the_vendored_bundle_named_by_its_version_and_cached(http):
    vendor = STATIC / "static" / "vendor"
    bundle = (vendor / PLOTLY_FILE).read_bytes()
    # The file is the published one: its license header intact, the version its name gives.
    version = re.fullmatch(r"plotly-cartesian-([\d.]+)\.min\.js", PLOTLY_FILE)
    assert version and bundle.startswith(b"/**\n* plotly.js (cartesian - minified) v")
    assert f"v{version.group(1)}\n".encode() in bundle[:100]
    assert b"Licensed under the MIT license" in bundle[:200]
    assert f"`{hashlib.sha256(bundle).hexdigest()}`" in (vendor / "VENDOR.md").read_text()
    plain = http.get(PLOTLY_URL, headers={"Accept-Encoding": "identity"})
    assert plain.status_code == 200 and plain.content == bundle
    assert plain.headers["content-type"].startswith("text/javascript")
    assert "immutable" in plain.headers["cache-control"]
    zipped = http.get(PLOTLY_URL, headers={"Accept-Encoding": "gzip"})
    assert zipped.headers["content-encoding"] == "gzip"
    assert int(zipped.headers["content-length"]) < len(bundle) / 2
    assert zipped.content == plain.content  # httpx decoded it
    again = http.get(PLOTLY_URL, headers={"If-None-Match": plain.headers["etag"]})
    assert again.status_code == 304 and again.content == b""


@pytest.mark.parametrize(
    ("name", "url", "media_type"),
    [(UPLOT_JS_FILE, UPLOT_JS_URL, "text/javascript"), (UPLOT_CSS_FILE, UPLOT_CSS_URL, "text/css")],
)
def test_uplot_is_the_vendored_build_named_by_its_version_and_cached(http, name, url, media_type):
    vendor = STATIC / "static" / "vendor"
    body = (vendor / name).read_bytes()
    # The published file, byte for byte (its checksum in VENDOR.md), of the version its name gives.
    version = re.fullmatch(r"uPlot-([\d.]+)\.(?:iife\.min\.js|min\.css)", name)
    assert version
    assert f"`{hashlib.sha256(body).hexdigest()}`" in (vendor / "VENDOR.md").read_text()
    if name.endswith(".js"):
        assert body.startswith(
            f"/*! https://github.com/leeoniya/uPlot (v{version.group(1)}) */".encode()
        )
    plain = http.get(url, headers={"Accept-Encoding": "identity"})
    assert plain.status_code == 200 and plain.content == body
    assert plain.headers["content-type"].startswith(media_type)
    assert "immutable" in plain.headers["cache-control"]
    zipped = http.get(url, headers={"Accept-Encoding": "gzip"})
    assert zipped.headers["content-encoding"] == "gzip" and zipped.content == body
    again = http.get(url, headers={"If-None-Match": plain.headers["etag"]})
    assert again.status_code == 304 and again.content == b""


def test_own_assets_revalidate_and_stay_inside_static(http):
    first = http.get("/static/common.js")
    assert first.status_code == 200 and first.headers["cache-control"] == "no-cache"
    assert first.headers["content-type"].startswith("text/javascript")
    assert (
        http.get("/static/common.js", headers={"If-None-Match": first.headers["etag"]}).status_code
        == 304
    )
    css = http.get("/static/pygments.css").text
    assert css and all(rule.startswith(".hl ") for rule in css.splitlines())
    for bad in (
        "/static/nope.js",
        "/static/..%2F__init__.py",
        "/static/.hidden.js",
        "/static/x.py",
    ):
        assert http.get(bad).status_code == 404, bad


def test_config_is_highlighted_byte_for_byte():
    html = render_config({"format": "toml", "text": "\n\n" + CONFIG_TOML + "\n\n"})
    text = re.sub(r"<[^>]+>", "", html.split("<code>", 1)[1].rsplit("</code>", 1)[0])
    unescaped = text.replace("&quot;", '"').replace("&#39;", "'").replace("&lt;", "<")
    assert unescaped.replace("&gt;", ">").replace("&amp;", "&") == "\n\n" + CONFIG_TOML + "\n\n"
    assert '<span class="c1"># RL run of the browser tests</span>' in html
    # Markup in a config is shown, never interpreted.
    html = render_config({"format": "text", "text": "<script>alert(1)</script>"})
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "lr" in render_config({"format": "unknown", "text": "lr = 1"})


def test_config_fragment_follows_the_runs_read_rules(http, seeded):
    response = http.get(f"/ui/runs/{seeded.train}/config")
    assert response.status_code == 200 and 'class="hl"' in response.text
    assert http.get(f"/ui/runs/{seeded.failed}/config").status_code == 204
    assert http.get("/ui/runs/no-such-run/config").status_code == 404
