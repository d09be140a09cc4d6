"""
Static assets of the dashboard, all package data of this module (the dashboard works
air-gapped):

- our own CSS and JavaScript (`web/static/`), sent with `Cache-Control: no-cache` and an ETag,
  so a browser revalidates (a 304) and an upgrade shows at once;
- uPlot's minified build and stylesheet (the metric charts of the run and compare pages), and
  Plotly's official "cartesian" partial bundle (the step page's reward histogram), vendored in
  `web/static/vendor/` (their source, checksums and how to update them:
  `static/vendor/VENDOR.md`), at URLs that name their versions, so they are cached for a year;
  and beside Plotly's bundle the stylesheet Plotly would otherwise inject as an
  inline <style> (which the pages' Content-Security-Policy forbids), generated from the same
  bundle's rule table: pages link it as `#plotly.js-style-global.no-inline-styles`, Plotly's
  own switch for that;
- the Pygments stylesheet of the config view, generated.

Each body is read and gzipped once, on first request (Plotly's 1.5 MB bundle is ~0.5 MB
gzipped), and answered from memory after that.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from ..errors import not_found
from .highlight import stylesheet

__all__ = [
    "UPLOT_CSS_FILE",
    "UPLOT_CSS_URL",
    "UPLOT_JS_FILE",
    "UPLOT_JS_URL",
    "PLOTLY_CSS_URL",
    "PLOTLY_FILE",
    "PLOTLY_URL",
    "plotly_bundle",
    "plotly_self_styled_ids",
    "plotly_stylesheet",
    "router",
]

router = APIRouter(include_in_schema=False)

_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}
_YEAR = "public, max-age=31536000, immutable"


# The vendored files' names name their versions (the URL is cached as immutable): an
# update is a new file and this name (static/vendor/VENDOR.md).
PLOTLY_FILE = "plotly-cartesian-4.1.1.min.js"
PLOTLY_URL = f"/static/vendor/{PLOTLY_FILE}"
UPLOT_JS_FILE = "uPlot-1.6.32.iife.min.js"
UPLOT_JS_URL = f"/static/vendor/{UPLOT_JS_FILE}"
UPLOT_CSS_FILE = "uPlot-1.6.32.min.css"
UPLOT_CSS_URL = f"/static/vendor/{UPLOT_CSS_FILE}"
PLOTLY_CSS_URL = f"/static/vendor/{PLOTLY_FILE.removesuffix('.min.js')}.css"
# Plotly's rule table (src/css/_*.scss compiled into the bundle): {"X .modebar": "...", ...},
# applied by a loop that replaces X and Y; the selectors and rules are quoted JS strings.
_PLOTLY_RULES = re.compile(r'=\{("X,X div":.*?)\};for\(\w+ in \w+\)', re.S)
_JS_STRING = r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\''
_PLOTLY_RULE = re.compile(rf"({_JS_STRING}|[A-Za-z_$][\w$]*):({_JS_STRING}),?")
# Modules bundled in Plotly that add their own <style> unless an element with its id exists
# (maplibre's, for map traces, which the dashboard does not draw).
_SELF_STYLED = re.compile(
    r'if\(!document\.getElementById\("([\w-]+)"\)\)\{var [\w$]+=document\.createElement\("style"\)'
)


@dataclass(frozen=True)
class _Asset:
    body: bytes
    gzipped: bytes
    media_type: str
    etag: str


_cache: dict[str, _Asset] = {}
_lock = threading.Lock()


def _load(name: str, read: Callable[[], bytes], media_type: str) -> _Asset:
    with _lock:
        if name not in _cache:
            body = read()
            etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
            _cache[name] = _Asset(body, gzip.compress(body, 6, mtime=0), media_type, etag)
        return _cache[name]


def _own_file(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


def _vendored(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", "vendor", name).read_bytes()


def plotly_bundle() -> bytes:
    """The vendored Plotly bundle, as served."""
    return _vendored(PLOTLY_FILE)


def plotly_stylesheet(bundle: str) -> str:
    """The CSS Plotly's bundle would add at run time, as a stylesheet. ValueError when the
    bundle does not hold the rule table in the expected form (a Plotly upgrade changed it)."""
    found = _PLOTLY_RULES.search(bundle)
    if found is None:
        raise ValueError("no style rule table in Plotly's bundle")
    table = found.group(1)
    rules = list(_PLOTLY_RULE.finditer(table))
    if not rules or "".join(m.group(0) for m in rules) != table:
        raise ValueError("the style rule table of Plotly's bundle has an unexpected form")
    out = []
    for match in rules:
        selector, body = (_js_string(match.group(i)) for i in (1, 2))
        selector = selector.replace(",", " ,", 1) if selector.startswith(",") else selector
        selector = selector.replace("X", ".js-plotly-plot .plotly").replace("Y", ".plotly-notifier")
        out.append(f"{selector}{{{body}}}")
    return "\n".join(out) + "\n"


def plotly_self_styled_ids() -> list[str]:
    """Ids of the <style> elements modules inside Plotly's bundle add at load unless an element
    with that id exists; a page puts an empty element there instead."""
    return _SELF_STYLED.findall(plotly_bundle().decode())


def _js_string(literal: str) -> str:
    """The text of a quoted JS string, or a bare property name as it is."""
    if literal[0] not in "'\"":
        return literal
    return re.sub(r"\\(.)", r"\1", literal[1:-1])


def _respond(request: Request, asset: _Asset, cache_control: str) -> Response:
    headers = {"Cache-Control": cache_control, "ETag": asset.etag, "Vary": "Accept-Encoding"}
    if request.headers.get("if-none-match") == asset.etag:
        return Response(status_code=304, headers=headers)
    if "gzip" in request.headers.get("accept-encoding", ""):
        headers["Content-Encoding"] = "gzip"
        return Response(asset.gzipped, media_type=asset.media_type, headers=headers)
    return Response(asset.body, media_type=asset.media_type, headers=headers)


@router.get(PLOTLY_URL)
async def plotly_js(request: Request) -> Response:
    asset = await run_in_threadpool(_load, "plotly", plotly_bundle, _TYPES[".js"])
    return _respond(request, asset, _YEAR)


@router.get(PLOTLY_CSS_URL)
async def plotly_css(request: Request) -> Response:
    asset = await run_in_threadpool(
        _load,
        "plotly.css",
        lambda: plotly_stylesheet(plotly_bundle().decode()).encode(),
        _TYPES[".css"],
    )
    return _respond(request, asset, _YEAR)


@router.get(UPLOT_JS_URL)
async def uplot_js(request: Request) -> Response:
    asset = await run_in_threadpool(
        _load, "uplot.js", lambda: _vendored(UPLOT_JS_FILE), _TYPES[".js"]
    )
    return _respond(request, asset, _YEAR)


@router.get(UPLOT_CSS_URL)
async def uplot_css(request: Request) -> Response:
    asset = await run_in_threadpool(
        _load, "uplot.css", lambda: _vendored(UPLOT_CSS_FILE), _TYPES[".css"]
    )
    return _respond(request, asset, _YEAR)


@router.get("/static/pygments.css")
async def pygments_css(request: Request) -> Response:
    asset = _load("pygments.css", lambda: stylesheet().encode(), _TYPES[".css"])
    return _respond(request, asset, "no-cache")


@router.get("/static/{name}")
async def own_asset(name: str, request: Request) -> Response:
    suffix = name[name.rfind(".") :] if "." in name else ""
    # Only flat names of our own kinds: no paths, so nothing outside static/ is reachable.
    if suffix not in _TYPES or "/" in name or "\\" in name or name.startswith("."):
        raise not_found(f"no asset {name!r}")
    try:
        asset = await run_in_threadpool(_load, name, lambda: _own_file(name), _TYPES[suffix])
    except (FileNotFoundError, IsADirectoryError) as exc:
        raise not_found(f"no asset {name!r}") from exc
    return _respond(request, asset, "no-cache")
